package stage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// With Concurrency 1, a message whose processing waits for a later message
// of the same consumer (a handler awaiting a peer's answer) would hold the
// only slot forever. Parked, it gives the slot back: the later message is
// fetched and processed, the wait ends, and the parked message finishes,
// kept alive throughout (its AckWait, 1 s, is far shorter than the wait).
func TestParkedDeliveryReleasesItsSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 1) // {"n":0}: waits for {"n":1}
	second := make(chan struct{})
	done := make(chan int, 2)
	r := e.runner(t, stage.Config{Concurrency: 1}, nil, func(ctx context.Context, d *stage.Delivery) {
		var m struct{ N int }
		_ = json.Unmarshal(d.Msg.Data(), &m)
		if m.N == 0 {
			// Published only now, so the pull loop cannot have it yet
			// (m-0 again is dropped by the duplicate window; m-1 is new).
			e.publish(t, 2)
			d.Park(func() {
				select {
				case <-second:
				case <-time.After(15 * time.Second):
					t.Error("the second message was never processed while the first was parked")
				}
			})
		} else {
			close(second)
		}
		if d.Meta.NumDelivered != 1 {
			t.Errorf("message %d delivered %d times; the parked one must stay alive", m.N, d.Meta.NumDelivered)
		}
		_ = d.Msg.Ack()
		done <- m.N
	})
	run := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx(t))
	go func() { run <- r.Run(runCtx) }()
	got := []int{<-done, <-done}
	cancel()
	if err := <-run; err != nil {
		t.Fatal(err)
	}
	if got[0] != 1 || got[1] != 0 {
		t.Errorf("finished in order %v, want [1 0] (the answer first, then the parked message)", got)
	}
}
