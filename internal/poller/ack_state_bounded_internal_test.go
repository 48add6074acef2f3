package poller

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// TestAckStateStaysBoundedWhileNothingCanBeAcked: behind a checkpoint's
// ceiling no settled row can be acked; the settled rows kept stay at most
// maxSettled, the unsettled ones are all kept, and the highest old row
// is still the candidate once the ceiling rises.
func TestAckStateStaysBoundedWhileNothingCanBeAcked(t *testing.T) {
	var a ackState
	a.protect(1)
	old := time.Now().Add(-time.Hour)
	a.note([]molecule.ActivityRow{{Seq: 2, CreatedAt: old}}, false)
	for i := range int64(3 * maxSettled) {
		a.note([]molecule.ActivityRow{{Seq: 10 + i, CreatedAt: old}}, true)
	}
	if len(a.settled) > maxSettled || !a.unsettled[2] {
		t.Fatalf("%d settled kept (max %d), unsettled %v", len(a.settled), maxSettled, a.unsettled)
	}
	if got := a.candidate(time.Now(), nil); got != 0 {
		t.Errorf("candidate %d under the ceiling and an unsettled row", got)
	}
	a.note([]molecule.ActivityRow{{Seq: 2, CreatedAt: old}}, true)
	a.protect(1 << 40)
	if got, want := a.candidate(time.Now(), nil), int64(10+3*maxSettled-1); got != want {
		t.Errorf("candidate %d, want %d", got, want)
	}
}
