package poller_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/poller"
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
