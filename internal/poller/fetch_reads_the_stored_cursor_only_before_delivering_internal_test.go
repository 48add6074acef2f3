package poller

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestFetchReadsTheStoredCursorOnlyBeforeDelivering: after its first
// read, a poller's fetch that finds nothing reads no cursor (at 10,000
// idle workspaces those reads were 83 a second). When it finds rows
// after its own copy, it reads the stored cursor before delivering any,
// and a cursor another poller moved meanwhile restarts the fetch from
// there: the rows the other poller published are not published again.
func TestFetchReadsTheStoredCursorOnlyBeforeDelivering(t *testing.T) {
	ctx, ns, js, topo := testTopology(t)
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("agent-a")
	newPoller := func() *Poller {
		c, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: ws.ID, Token: ws.Token, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		// No overlap re-read: it reads the cursor on its own schedule.
		p, err := New(js, topo, Config{Workspaces: []*molecule.Client{c}, PollInterval: 20 * time.Millisecond, OverlapWindow: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	send := func(text string) {
		t.Helper()
		if st, body, err := plat.SendCanvas(ctx, ws.ID, text); err != nil || st != 200 {
			t.Fatalf("send %q: %d %s %v", text, st, body, err)
		}
	}
	reads := countBucketReads(t, ns, topo.Cursors.Bucket())
	run := func(p *Poller, why string, wantPublished, wantReads int) {
		t.Helper()
		before := reads()
		res, err := p.RunOnce(ctx)
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			t.Fatalf("%s: %v", why, err)
		}
		r := res.Workspaces[0]
		if r.Published != wantPublished || r.Duplicates != 0 {
			t.Errorf("%s: published %d (%d duplicates), want %d and none", why, r.Published, r.Duplicates, wantPublished)
		}
		if got := reads() - before; wantReads >= 0 && got != wantReads {
			t.Errorf("%s: %d cursor reads, want %d", why, got, wantReads)
		}
	}
	a, b := newPoller(), newPoller()
	run(a, "a's first cycle", 0, -1)
	send("m1")
	run(a, "a finds m1", 1, 2) // before delivering, and for the feed's ack
	run(a, "a finds nothing new", 0, 0)
	run(a, "and again", 0, 0)
	send("m2")
	run(b, "b finds m2", 1, -1)
	send("m3")
	// a's copy is still at m1: it finds m2 and m3, reads the cursor b
	// moved, and fetches again from m2.
	run(a, "a after b moved the cursor", 1, -1)
	run(a, "a finds nothing new after that", 0, 0)
	if n := streamCountOf(t, ctx, topo); n != 3 {
		t.Errorf("inbound stream holds %d messages, want 3", n)
	}
}

func streamCountOf(t *testing.T, ctx context.Context, topo *events.Topology) uint64 {
	t.Helper()
	info, err := topo.Inbound.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
