package poller

import (
	"context"
	"log/slog"
	"testing"
)

// TestCheckpointReadsOnlyCursorsThisProcessMoved: the periodic checkpoint
// reads each workspace's cursor once, then only the cursors this process
// moved since it looked: at 10,000 idle workspaces, reading them all at
// every tick was 3.6 % of the relay's CPU.
func TestCheckpointReadsOnlyCursorsThisProcessMoved(t *testing.T) {
	ctx, ns, _, topo := testTopology(t)
	reads := countBucketReads(t, ns, topo.Cursors.Bucket())
	p := &Poller{topo: topo, log: slog.New(slog.DiscardHandler)}
	for _, id := range []string{"ws-1", "ws-2", "ws-3"} {
		p.ws = append(p.ws, &workspace{id: id, log: p.log})
	}
	busy := func(context.Context) (bool, error) {
		t.Fatal("asked whether everything was answered with no cursor to write")
		return false, nil
	}
	tick := func(want int, why string) {
		t.Helper()
		before := reads()
		if _, err := p.CheckpointAnswered(ctx, busy); err != nil {
			t.Fatal(err)
		}
		if got := reads() - before; got != want {
			t.Errorf("%s: %d cursor reads, want %d", why, got, want)
		}
	}
	tick(3, "first tick")
	tick(0, "second tick, nothing moved")
	p.ws[1].cursorMoves.Add(1) // as saveCursor does
	tick(1, "after this process moved one cursor")
	tick(0, "and again, nothing moved")
}
