package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A drain decides how long a pull may wait (the start-margin rule) only
// once it holds a free slot: after a long wait for the slot, it takes no
// message it can no longer start, so no delivery is spent (plain Nak)
// without a handler run.
func TestDrainFetchesNoMessageItCannotStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{DispatcherAckWait: 5 * time.Second})
	e.publish(t, inbound(1))
	e.publish(t, inbound(2))
	var c calls
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		c.add(req.Message.ActivityID, req.Delivery)
		if req.Message.ActivityID == inbound(1).ActivityID {
			time.Sleep(1800 * time.Millisecond) // holds the only slot
		}
		return "ok", nil
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{Concurrency: 1, StartMargin: 500 * time.Millisecond}, HandlerTimeout: 2 * time.Second})

	// A 4 s invocation: room for the first handler (2 s + 0.5 s), none for
	// a second one after it.
	inv, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	st, err := d.Drain(inv, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The next invocation handles the second message.
	if _, err := d.Drain(ctx(t), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := c.of(inbound(2).ActivityID); fmt.Sprint(got) != "[1]" || st.Deferred != 0 {
		t.Fatalf("second message's handler deliveries %v (first invocation: received %d, deferred %d); want [1]: it was fetched after the start-margin cut-off and nak'd, spending a delivery without a handler run",
			got, st.Received, st.Deferred)
	}
}
