package stage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// RetryWrite: a success or a permanent failure ends it after one try; a
// transient failure is tried again only after a backoff wait (never twice
// at once); a cancelled ctx ends the retries with its error.
func TestRetryWrite(t *testing.T) {
	errBusy, errBad := errors.New("busy"), errors.New("bad")
	for _, tc := range []struct {
		name      string
		fails     []error // what the tries return before succeeding
		cancelled bool
		want      error
		tries     int
	}{
		{name: "success", tries: 1},
		{name: "permanent", fails: []error{backoff.Permanent(errBad)}, want: errBad, tries: 1},
		{name: "connection closed", fails: []error{nats.ErrConnectionClosed}, want: nats.ErrConnectionClosed, tries: 1},
		{name: "transient twice", fails: []error{errBusy, errBusy}, tries: 3},
		{name: "transient then permanent", fails: []error{errBusy, backoff.Permanent(errBad)}, want: errBad, tries: 2},
		{name: "cancelled", fails: []error{errBusy, errBusy}, cancelled: true, want: context.Canceled, tries: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			var at []time.Time
			err := stage.RetryWrite(ctx, func() error {
				at = append(at, time.Now())
				if len(at) <= len(tc.fails) {
					return tc.fails[len(at)-1]
				}
				return nil
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("RetryWrite = %v, want %v", err, tc.want)
			}
			if len(at) != tc.tries {
				t.Fatalf("%d tries, want %d", len(at), tc.tries)
			}
			for i := 1; i < len(at); i++ {
				// 50 ms initial interval, randomised by ±50%.
				if gap := at[i].Sub(at[i-1]); gap < 20*time.Millisecond {
					t.Errorf("try %d came %v after the one before, want a backoff wait", i+1, gap)
				}
			}
		})
	}
}

// TestRetryWriteSucceedsWithoutAllocating pins why the first try runs
// before any backoff state exists.
func TestRetryWriteSucceedsWithoutAllocating(t *testing.T) {
	ctx := t.Context()
	op := func() error { return nil }
	if n := testing.AllocsPerRun(100, func() { _ = stage.RetryWrite(ctx, op) }); n != 0 {
		t.Errorf("RetryWrite of a write that succeeds: %v allocations, want 0", n)
	}
}

// TestRetryRequestTriesAgainAfterAnUnansweredTry: a request that is never
// answered (sent to a leader that died) costs one AttemptTimeout, not the
// whole operation's context; the next try, answered, ends it.
func TestRetryRequestTriesAgainAfterAnUnansweredTry(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tries := 0
	start := time.Now()
	err := stage.RetryRequest(ctx, func(ctx context.Context) error {
		tries++
		if tries == 1 {
			<-ctx.Done() // no answer: the try's own bound ends it
			return ctx.Err()
		}
		return nil
	})
	took := time.Since(start)
	if err != nil || tries != 2 {
		t.Fatalf("RetryRequest = %v after %d tries, want success on the second", err, tries)
	}
	if took < stage.AttemptTimeout || took > stage.AttemptTimeout+5*time.Second {
		t.Errorf("took %s, want about one AttemptTimeout (%s)", took, stage.AttemptTimeout)
	}
}

// TestRetryRequestReturnsPermanentErrorsUnwrapped: an answer that ends the
// retries (backoff.Permanent) comes back as the caller's sentinel.
func TestRetryRequestReturnsPermanentErrorsUnwrapped(t *testing.T) {
	errExists := errors.New("exists")
	tries := 0
	err := stage.RetryRequest(t.Context(), func(context.Context) error {
		tries++
		if tries == 1 {
			return errors.New("no responders")
		}
		return backoff.Permanent(errExists)
	})
	if err != errExists || tries != 2 {
		t.Errorf("RetryRequest = %v after %d tries, want %v after 2", err, tries, errExists)
	}
}
