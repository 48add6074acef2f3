package stage_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A drain until empty (connect --once) ends as soon as the consumer holds
// nothing: an empty queue at once, a full one right after its last ack,
// without sitting out idle (5 s here). Drain waits idle on an empty queue
// (and, for a pull that got fewer messages than it asked for, the pull's
// whole wait first): connect --once spent 2 s of its 2.1 s there with
// nothing queued.
func TestDrainUntilEmptyEndsWhenTheQueueIsEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	var acked atomic.Int64
	r := e.runner(t, stage.Config{Concurrency: 4, FetchWait: time.Second}, nil, func(ctx context.Context, d *stage.Delivery) {
		if err := d.Msg.Ack(); err == nil {
			acked.Add(1)
		}
	})
	const idle = 5 * time.Second
	start := time.Now()
	if _, err := r.DrainUntilEmpty(ctx(t), idle); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > idle/5 {
		t.Errorf("empty queue drained in %s, want at once", took)
	}
	e.publish(t, 20)
	start = time.Now()
	st, err := r.DrainUntilEmpty(ctx(t), idle)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if st.Received != 20 || acked.Load() != 20 {
		t.Errorf("received %d, acked %d; want 20", st.Received, acked.Load())
	}
	if n := e.left(t); n != 0 {
		t.Errorf("%d left on the consumer", n)
	}
	if took > idle/5 {
		t.Errorf("20 messages drained in %s, want right after the last ack", took)
	}
	t.Logf("empty queue and 20 messages drained; the 20 in %s", took.Round(time.Millisecond))
}

// A message published a moment before the drain is handled: the server
// acknowledges a publish before it offers the message to the consumers
// (nats-server v2.15 stream.go, the consumers' signal queue), so for that
// moment the consumer's pending count, and a pull that does not wait, miss
// it; the drain compares what the consumer was delivered with the
// stream's last sequence instead. Before, one run of the relay's e2e test
// under load found the queue empty, handled none of its 6 messages and
// reported success.
func TestDrainUntilEmptyHandlesWhatWasJustPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	var acked atomic.Int64
	r := e.runner(t, stage.Config{Concurrency: 4}, nil, func(ctx context.Context, d *stage.Delivery) {
		if err := d.Msg.Ack(); err == nil {
			acked.Add(1)
		}
	})
	for round := range 30 {
		e.publishFrom(t, round*3, 3)
		if _, err := r.DrainUntilEmpty(ctx(t), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if got, want := acked.Load(), int64(3*(round+1)); got != want {
			t.Fatalf("round %d: %d handled, want %d", round, got, want)
		}
	}
}

// A retry waiting for its redelivery keeps a drain until empty going for
// up to idle after the last message: a redelivery within it is handled,
// one beyond it is left queued for the caller to report (the run's
// "pending").
func TestDrainUntilEmptyWaitsForARetryUpToIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	var r *stage.Runner
	var deliveries atomic.Int64
	r = e.runner(t, stage.Config{}, nil, func(ctx context.Context, d *stage.Delivery) {
		if deliveries.Add(1) == 1 {
			r.Retry(d, 0) // RetryBase 20 ms
			return
		}
		_ = d.Msg.Ack()
	})
	e.publish(t, 1)
	if _, err := r.DrainUntilEmpty(ctx(t), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, left := deliveries.Load(), e.left(t); n != 2 || left != 0 {
		t.Fatalf("%d deliveries, %d left; want the retry handled and none left", n, left)
	}

	e2 := newEnv(t, events.TopologyConfig{})
	var r2 *stage.Runner
	r2 = e2.runner(t, stage.Config{}, nil, func(ctx context.Context, d *stage.Delivery) {
		r2.Defer(d, time.Minute)
	})
	e2.publish(t, 1)
	const idle = 300 * time.Millisecond
	start := time.Now()
	if _, err := r2.DrainUntilEmpty(ctx(t), idle); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < idle || took > idle+time.Second {
		t.Errorf("drain with a deferred message took %s, want about idle (%s)", took, idle)
	}
	if left := e2.left(t); left != 1 {
		t.Errorf("%d left, want the deferred message still queued", left)
	}
}
