package stage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// opRunner is a Runner whose operations end storeTimeout after they
// start, and a plain connection to its embedded server.
func opRunner(t *testing.T, storeTimeout time.Duration) (*stage.Runner, *nats.Conn) {
	t.Helper()
	e := newEnv(t, events.TopologyConfig{})
	nc, _ := natstest.Connect(t, e.js.Conn().ConnectedUrl())
	r := e.runner(t, stage.Config{StoreTimeout: storeTimeout}, nil, func(context.Context, *stage.Delivery) {})
	return r, nc
}

// TestUnansweredRequestEndsAtTheOpDeadline: a request nobody answers (a
// subscriber that never replies, as a leader that died) ends at the
// operation's deadline when that comes before the try's AttemptTimeout,
// with context.DeadlineExceeded.
func TestUnansweredRequestEndsAtTheOpDeadline(t *testing.T) {
	t.Parallel()
	const storeTimeout = 300 * time.Millisecond
	r, nc := opRunner(t, storeTimeout)
	sub, err := nc.Subscribe("silent", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	ctx, cancel := r.OpContext(t.Context())
	defer cancel()
	opDeadline, _ := ctx.Deadline()
	tries := 0
	start := time.Now()
	err = stage.RetryRequest(ctx, func(ctx context.Context) error {
		tries++
		_, err := nc.RequestWithContext(ctx, "silent", nil)
		return err
	})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || tries != 1 {
		t.Fatalf("RetryRequest = %v after %d tries, want %v after 1", err, tries, context.DeadlineExceeded)
	}
	if time.Now().Before(opDeadline) {
		t.Errorf("ended %s before the operation's deadline", time.Until(opDeadline))
	}
	if took >= stage.AttemptTimeout {
		t.Errorf("took %s, want the operation's %s, not a whole AttemptTimeout", took, storeTimeout)
	}
}

// TestRetriedTransientFailureStopsAtTheOpDeadline: a try that keeps
// failing is retried only within the operation's deadline, each try
// bounded by it, and the retries end with context.DeadlineExceeded.
func TestRetriedTransientFailureStopsAtTheOpDeadline(t *testing.T) {
	t.Parallel()
	const storeTimeout = 300 * time.Millisecond
	r, _ := opRunner(t, storeTimeout)
	ctx, cancel := r.OpContext(t.Context())
	defer cancel()
	opDeadline, _ := ctx.Deadline()
	tries := 0
	err := stage.RetryRequest(ctx, func(actx context.Context) error {
		tries++
		if dl, ok := actx.Deadline(); !ok || dl.After(opDeadline) {
			t.Errorf("try %d: deadline %v (set: %v), after the operation's %v", tries, dl, ok, opDeadline)
		}
		return errors.New("no responders")
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RetryRequest = %v after %d tries, want %v", err, tries, context.DeadlineExceeded)
	}
	if time.Now().Before(opDeadline) || tries < 2 {
		t.Errorf("ended %s before the operation's deadline after %d tries", time.Until(opDeadline), tries)
	}
}

// TestBackoffWaitEndsAtTheOpDeadline: the wait between tries is cut at the
// operation's deadline, not slept out: with a deadline well inside the
// first wait (at least 25 ms), no second try starts.
func TestBackoffWaitEndsAtTheOpDeadline(t *testing.T) {
	t.Parallel()
	r, _ := opRunner(t, 2*time.Millisecond)
	ctx, cancel := r.OpContext(t.Context())
	defer cancel()
	tries := 0
	err := stage.RetryRequest(ctx, func(context.Context) error {
		tries++
		return errors.New("no responders")
	})
	if !errors.Is(err, context.DeadlineExceeded) || tries != 1 {
		t.Errorf("RetryRequest = %v after %d tries, want %v after 1", err, tries, context.DeadlineExceeded)
	}
}

// TestRunCancelDoesNotCutAnOpShort: a stopped run (its context cancelled
// before the operation, or while its request waits for the answer) lets
// the operation finish.
func TestRunCancelDoesNotCutAnOpShort(t *testing.T) {
	t.Parallel()
	r, nc := opRunner(t, 30*time.Second)
	got, release := make(chan struct{}, 1), make(chan struct{})
	sub, err := nc.Subscribe("slow", func(m *nats.Msg) {
		got <- struct{}{}
		<-release
		_ = m.Respond([]byte("ok"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	runCtx, stopRun := context.WithCancel(t.Context())
	ctx, cancel := r.OpContext(runCtx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- stage.RetryRequest(ctx, func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, "slow", nil)
			return err
		})
	}()
	<-got
	stopRun()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("RetryRequest after the run stopped mid-request = %v, want the answer", err)
	}

	// The run is stopped: a new operation of it still runs.
	ctx2, cancel2 := r.OpContext(runCtx)
	defer cancel2()
	if err := ctx2.Err(); err != nil {
		t.Fatalf("OpContext of a stopped run: Err = %v, want nil", err)
	}
	// release is closed: the subscriber answers at once now.
	if err := stage.RetryRequest(ctx2, func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "slow", nil)
		return err
	}); err != nil {
		t.Errorf("RetryRequest in a stopped run = %v, want the answer", err)
	}
}
