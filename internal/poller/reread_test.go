package poller_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// After a NATS restart the inbound stream has forgotten the ids of the
// messages the dispatcher consumed (work-queue retention), so the overlap
// re-read used to publish every row of its window again ("rows=200 … late
// commits"). The cursor record now keeps the recently published ids: the
// re-read recognises them, publishes nothing, and says so.
func TestOverlapRereadAfterRestartDoesNotRepublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := poller.Config{OverlapWindow: 2 * time.Minute, OverlapEvery: time.Millisecond}
	e.runOnce(e.poller(cfg)) // registers and seeds
	const n = 5
	for i := range n {
		e.sendCanvas(e.ws.ID, "m"+string(rune('a'+i)))
	}
	if got := e.runOnce(e.poller(cfg)); got.Published != n {
		t.Fatalf("published %d, want %d", got.Published, n)
	}
	// The dispatcher consumes them: work-queue retention deletes them.
	msgs, err := e.topo.Dispatcher.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx(t)); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != n {
		t.Fatalf("consumed %d, want %d", acked, n)
	}

	ns := e.ns.Restart(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e.js, e.topo = js, topo
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	got := e.runOnce(e.poller(cfg))
	if !got.Overlap {
		t.Fatal("the overlap re-read did not run")
	}
	if got.Published != 0 || got.Skipped[poller.SkipPublished] != n {
		t.Fatalf("re-read published %d and recognised %d; want 0 and %d", got.Published, got.Skipped[poller.SkipPublished], n)
	}
	if left := streamCount(t, topo.Inbound); left != 0 {
		t.Fatalf("%d messages in the inbound stream after the re-read", left)
	}
	if !strings.Contains(logs.String(), "reread=") || !strings.Contains(logs.String(), "new=0") {
		t.Fatalf("no re-read log line:\n%s", logs.String())
	}
}

// A poller restarted under load used to republish the older part of its
// first overlap re-read: the cursor record keeps only the newest 1,000
// published ids, and beyond them the stream's de-duplication, which a
// restarted cluster node forgets for consumed messages (600 to 1,036
// handled messages per re-read under make chaos-cluster). The poller now
// leaves a snapshot of everything it published in the window, which the
// restarted one reads: its re-read sends nothing already published (no
// publish reaches the stream, not even one it drops as a duplicate), and
// still finds the row that committed behind the cursor.
func TestRestartedPollerRereadRepublishesNothingAndFindsTheLateRow(t *testing.T) {
	t.Parallel()
	const n = 1500 // more than the cursor record keeps
	// Queued row n+1 commits late: created before row n+2, visible after.
	const lag = 5 * time.Second
	e := newEnv(t, moleculetest.WithLateCommit(1/(n+0.5), lag), moleculetest.WithRateLimit(0, 0))
	cfg := poller.Config{OverlapWindow: 2 * time.Minute, OverlapEvery: time.Millisecond, PageLimit: poller.MaxPageLimit}
	first := e.poller(cfg)
	e.runOnce(first) // registers and seeds
	for i := range n {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
	}
	if got := e.runOnce(first); got.Published != n {
		t.Fatalf("published %d, want %d", got.Published, n)
	}
	e.sendCanvas(e.ws.ID, "late")
	e.sendCanvas(e.ws.ID, "after the late one")
	got := e.runOnce(first)
	if got.Published != 1 {
		t.Fatalf("the cycle after the late row published %d, want 1 (the row after it; the late one is not visible yet)", got.Published)
	}
	// The late row sits between the n sent first and the last one.
	all := e.messageRowIDs(e.ws.ID)
	late := all[n]
	c := e.client(e.ws)
	waitFor(t, 2*lag, "the late row visible", func() bool {
		page, err := c.Activity(ctx(t), molecule.ActivityQuery{Type: "a2a_receive", SinceID: all[n-1], Limit: 1})
		return err == nil && len(page.Rows) == 1 && page.Rows[0].ID == late
	})

	// A new process: nothing in memory.
	restarted := e.poller(cfg)
	got = e.runOnce(restarted)
	if !got.Overlap {
		t.Fatal("the overlap re-read did not run")
	}
	if got.Published != 1 || got.Duplicates != 0 {
		t.Fatalf("restarted re-read published %d and sent %d duplicates; want only the late row (1, 0)", got.Published, got.Duplicates)
	}
	if got.Skipped[poller.SkipPublished] != n+1 {
		t.Fatalf("restarted re-read recognised %d rows as published, want %d", got.Skipped[poller.SkipPublished], n+1)
	}
	assertExactlyOnce(t, e.inbound(), all)
	if in := e.inbound(); in[len(in)-1].ActivityID != late {
		t.Fatalf("the last publish is %s, want the late row %s", in[len(in)-1].ActivityID, late)
	}
}

// A poller restarted every few hundred rows (stage SIGKILLs under make
// chaos-cluster: six pollers in a minute) never published more than the
// cursor keeps in one life, so none wrote a snapshot, and the sixth
// republished 1,036 rows. Each process now carries forward what the
// previous ones knew (their snapshot and the cursor's recent ids): the
// last one's re-read sends nothing already published.
func TestPollerRestartedEveryFewHundredRowsRereadRepublishesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	cfg := poller.Config{OverlapWindow: 2 * time.Minute, OverlapEvery: time.Millisecond, PageLimit: poller.MaxPageLimit}
	e.runOnce(e.poller(cfg)) // registers and seeds
	const lives, each = 4, 400
	for life := range lives {
		for i := range each {
			e.sendCanvas(e.ws.ID, fmt.Sprint("life ", life, " m", i))
		}
		if got := e.runOnce(e.poller(cfg)); got.Published != each || got.Duplicates != 0 {
			t.Fatalf("life %d published %d and sent %d duplicates, want %d and 0", life, got.Published, got.Duplicates, each)
		}
	}
	got := e.runOnce(e.poller(cfg))
	if got.Published != 0 || got.Duplicates != 0 || got.Skipped[poller.SkipPublished] != lives*each {
		t.Fatalf("the last poller's re-read published %d, sent %d duplicates and recognised %d; want 0, 0 and %d",
			got.Published, got.Duplicates, got.Skipped[poller.SkipPublished], lives*each)
	}
	// The snapshot shares the status bucket; status lists workspaces only.
	if st, err := poller.ReadStatus(ctx(t), e.topo); err != nil || len(st) != 1 || st[0].WorkspaceID != e.ws.ID {
		t.Fatalf("status of every workspace: %+v, %v; want only %s", st, err, e.ws.ID)
	}
}
