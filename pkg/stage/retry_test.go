package stage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/pkg/stage"
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
