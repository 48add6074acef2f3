package stage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A stage's step only says what should happen to its message; the Runner
// applies it: here a retry, a defer, then a dead letter of the same
// message, each counted as the Runner's own finishing would count it.
func TestTheRunnerAppliesTheOutcomeAStepReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 1)
	cfg := stage.Config{FetchWait: 100 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	r, err := stage.Open(e.js, e.target(), &cfg, 0, 0, nil, func(_ context.Context, d *stage.Delivery) stage.Outcome {
		switch d.Meta.NumDelivered {
		case 1:
			return stage.Retry(0)
		case 2:
			return stage.Defer(0)
		}
		d.WorkspaceID, d.ActivityID = ws, "act-1"
		return stage.DeadLetter(events.ReasonPermanent, errors.New("refused for good"))
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Drain(ctx(t), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Received != 3 || st.Retried != 1 || st.Deferred != 1 || st.DeadLettered != 1 || st.Terminated != 1 {
		t.Errorf("stats %+v, want 3 received: one retried, one deferred, one dead-lettered", st)
	}
	entries, err := dlq.List(ctx(t), e.js, dlq.Filter{})
	if err != nil || len(entries) != 1 || entries[0].DeadLetter.Reason != events.ReasonPermanent || entries[0].DeadLetter.ActivityID != "act-1" {
		t.Fatalf("dead letters %+v, %v; want the one with its reason", entries, err)
	}
	if n := e.left(t); n != 0 {
		t.Errorf("%d left", n)
	}
}

func TestStepsWrapFirstOutermost(t *testing.T) {
	var order []string
	wrap := func(name string) stage.Wrap[int] {
		return func(next stage.Step[int]) stage.Step[int] {
			return func(ctx context.Context, m int) stage.Outcome {
				order = append(order, name)
				return next(ctx, m)
			}
		}
	}
	step := stage.Steps(func(context.Context, int) stage.Outcome { order = append(order, "step"); return stage.Ack("") }, wrap("a"), wrap("b"))
	if o := step(context.Background(), 0); o.String() != "ack" || fmt.Sprint(order) != "[a b step]" {
		t.Errorf("outcome %v, order %v", o, order)
	}
}
