package poller_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The cursor record is written on every page. It used to carry the newest
// 1,000 published ids on every save: at ten messages a second, a 56 KB
// record per message. It now carries only the rows no published-row
// snapshot holds yet, and a restarted poller still recognises every row,
// from the snapshot or from the cursor.
func TestCursorRecordCarriesOnlyRowsNoSnapshotHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	cfg := poller.Config{OverlapWindow: 2 * time.Minute, OverlapEvery: time.Minute, PageLimit: poller.MaxPageLimit}
	first := e.poller(cfg)
	e.runOnce(first) // registers and seeds
	const n = 300    // enough for a snapshot, fewer than the cursor could keep
	for i := range n {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
	}
	if got := e.runOnce(first); got.Published != n {
		t.Fatalf("published %d, want %d", got.Published, n)
	}
	if got := len(e.cursorRecent(t)); got != n {
		t.Fatalf("the cursor saved before the first snapshot carries %d ids, want all %d", got, n)
	}
	// That cycle ended with the snapshot; the next save drops its rows.
	e.sendCanvas(e.ws.ID, "after the snapshot")
	if got := e.runOnce(first); got.Published != 1 {
		t.Fatalf("published %d, want 1", got.Published)
	}
	if got := e.cursorRecent(t); len(got) != 1 {
		t.Fatalf("the cursor carries %d ids, want 1 (the row published after the snapshot)", len(got))
	}

	restarted := e.poller(poller.Config{OverlapWindow: 2 * time.Minute, OverlapEvery: time.Millisecond, PageLimit: poller.MaxPageLimit})
	got := e.runOnce(restarted)
	if !got.Overlap || got.Published != 0 || got.Duplicates != 0 || got.Skipped[poller.SkipPublished] != n+1 {
		t.Fatalf("restarted re-read: ran %v, published %d, sent %d duplicates, recognised %d; want true, 0, 0, %d",
			got.Overlap, got.Published, got.Duplicates, got.Skipped[poller.SkipPublished], n+1)
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
}

// cursorRecent reads the stored cursor record's recent ids.
func (e *env) cursorRecent(t *testing.T) map[string]int64 {
	t.Helper()
	entry, err := e.topo.Cursors.Get(ctx(t), e.ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Recent map[string]int64 `json:"recent"`
	}
	if err := json.Unmarshal(entry.Value(), &v); err != nil {
		t.Fatal(err)
	}
	return v.Recent
}
