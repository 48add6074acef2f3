package stage_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// An ack waits for the server's confirmation (a double ack: the ack asks
// for a reply) only with ConfirmAcks, which the relay sets on a replicated
// cluster; on one server the round trip is not spent. The acks are read
// off the wire by a second connection subscribed to $JS.ACK.>.
func TestAckIsConfirmedOnlyWithConfirmAcks(t *testing.T) {
	t.Parallel()
	for _, confirm := range []bool{false, true} {
		srv := natstest.Start(t)
		nc, js := natstest.Connect(t, srv.ClientURL())
		topo, err := events.EnsureTopology(ctx(t), js, events.TopologyConfig{Storage: jetstream.MemoryStorage, DispatcherAckWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e := &env{js: js, topo: topo}
		sniff, _ := natstest.Connect(t, srv.ClientURL())
		sub, err := sniff.SubscribeSync("$JS.ACK.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := sniff.Flush(); err != nil {
			t.Fatal(err)
		}
		e.publish(t, 1)
		var r *stage.Runner
		r = e.runner(t, stage.Config{ConfirmAcks: confirm}, nil, func(ctx context.Context, d *stage.Delivery) {
			r.Ack(ctx, d, slog.Default(), "nothing")
		})
		if _, err := r.Drain(ctx(t), 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// A plain ack may still sit in the client's buffer: flush it to the
		// server, then flush the sniffer so that whatever the server routed
		// to it before is in its queue.
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		ack, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("ConfirmAcks=%v: no ack on the wire: %v", confirm, err)
		}
		if err := sniff.Flush(); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := sub.Pending(); n != 0 {
			t.Errorf("ConfirmAcks=%v: %d more acks on the wire, want 1 in all", confirm, n)
		}
		if asked := ack.Reply != ""; asked != confirm {
			t.Errorf("ConfirmAcks=%v: the ack asked for a confirmation: %v", confirm, asked)
		}
		if n := e.left(t); n != 0 {
			t.Errorf("ConfirmAcks=%v: %d left on the consumer", confirm, n)
		}
	}
}
