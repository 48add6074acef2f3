package poller

import (
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// TestSentSetRemembersMoreThanTheCursorsRecentSet: what this process
// published is recognised for the whole keep window, beyond the cursor's
// maxRecent ids, and forgotten once older than keep.
func TestSentSetRemembersMoreThanTheCursorsRecentSet(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	var s sentSet
	n := 4 * maxRecent
	rows := make([]recentID, n)
	for i := range rows {
		rows[i] = recentID{id: fmt.Sprintf("a-%d", i), createdAt: now.Add(-time.Duration(n-i) * 10 * time.Millisecond)}
	}
	s.add(rows, keep, now)
	for _, i := range []int{0, maxRecent, n - 1} {
		if !s.has(molecule.ActivityRow{ID: rows[i].id}) {
			t.Errorf("row %d of %d published by this process not recognised", i, n)
		}
	}
	if s.has(molecule.ActivityRow{ID: "never-sent"}) || s.has(molecule.ActivityRow{}) {
		t.Error("a row never published (or without an id) recognised")
	}
	later := now.Add(keep + time.Minute)
	s.add([]recentID{{id: "new", createdAt: later}}, keep, later)
	if s.has(molecule.ActivityRow{ID: rows[n-1].id}) || !s.has(molecule.ActivityRow{ID: "new"}) {
		t.Error("rows older than keep are still remembered, or the new one is not")
	}
}
