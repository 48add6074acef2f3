package stage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

type valueKey struct{}

// TestOpContextActsAsWithTimeout: OpContext, which starts no timer until
// something waits on it, keeps the contract of
// context.WithTimeout(context.WithoutCancel(runCtx), StoreTimeout) for
// whoever does: its end closes Done, sets Err and Cause, reaches children
// and AfterFuncs, whether Done was asked for before or after the end.
func TestOpContextActsAsWithTimeout(t *testing.T) {
	t.Parallel()
	const storeTimeout = 200 * time.Millisecond
	r, _ := opRunner(t, storeTimeout)
	runCtx := context.WithValue(t.Context(), valueKey{}, "run's value")

	t.Run("values and deadline", func(t *testing.T) {
		before := time.Now()
		ctx, cancel := r.OpContext(runCtx)
		defer cancel()
		if v := ctx.Value(valueKey{}); v != "run's value" {
			t.Errorf("Value = %v, want the run context's", v)
		}
		dl, ok := ctx.Deadline()
		if !ok || dl.Before(before.Add(storeTimeout)) || dl.After(time.Now().Add(storeTimeout)) {
			t.Errorf("Deadline = %v, %v; want StoreTimeout from now", dl, ok)
		}
		if err := ctx.Err(); err != nil {
			t.Errorf("Err = %v before the end", err)
		}
	})
	for _, asked := range []string{"Done asked before the end", "Done asked after the end"} {
		t.Run("deadline, "+asked, func(t *testing.T) {
			ctx, cancel := r.OpContext(runCtx)
			defer cancel()
			var done <-chan struct{}
			if asked == "Done asked before the end" {
				done = ctx.Done()
			} else {
				time.Sleep(time.Until(deadlineOf(ctx)))
				if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Err past the deadline, Done never asked = %v", err)
				}
				done = ctx.Done()
			}
			<-done
			checkEnded(t, ctx, context.DeadlineExceeded)
		})
		t.Run("cancel, "+asked, func(t *testing.T) {
			ctx, cancel := r.OpContext(runCtx)
			var done <-chan struct{}
			if asked == "Done asked before the end" {
				done = ctx.Done()
			}
			cancel()
			if done == nil {
				done = ctx.Done()
			}
			select {
			case <-done:
			default:
				t.Fatal("Done not closed by cancel")
			}
			checkEnded(t, ctx, context.Canceled)
		})
	}
	t.Run("children and AfterFunc", func(t *testing.T) {
		ctx, cancel := r.OpContext(runCtx)
		child, cancelChild := context.WithCancel(ctx)
		defer cancelChild()
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		cancel()
		<-child.Done()
		<-ran
		if err := child.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("child's Err = %v, want %v", err, context.Canceled)
		}
	})
	t.Run("cancel reaches the try in flight", func(t *testing.T) {
		ctx, cancel := r.OpContext(runCtx)
		var tryErr error
		err := stage.RetryRequest(ctx, func(actx context.Context) error {
			cancel()
			select {
			case <-actx.Done():
				tryErr = actx.Err()
			case <-time.After(storeTimeout / 2):
				tryErr = errors.New("try not cancelled")
			}
			return tryErr
		})
		if !errors.Is(tryErr, context.Canceled) || !errors.Is(err, context.Canceled) {
			t.Errorf("try's Err = %v, RetryRequest = %v; want both %v", tryErr, err, context.Canceled)
		}
	})
	t.Run("cancel reaches concurrent tries", func(t *testing.T) {
		ctx, cancel := r.OpContext(runCtx)
		started, tryErrs := make(chan struct{}, 2), make(chan error, 2)
		for range 2 {
			go func() {
				_ = stage.RetryRequest(ctx, func(actx context.Context) error {
					started <- struct{}{}
					select {
					case <-actx.Done():
						tryErrs <- actx.Err()
					case <-time.After(storeTimeout / 2):
						tryErrs <- errors.New("try not cancelled")
					}
					return backoff.Permanent(errors.New("one try only"))
				})
			}()
		}
		<-started
		<-started
		cancel()
		for range 2 {
			if err := <-tryErrs; !errors.Is(err, context.Canceled) {
				t.Errorf("try's Err = %v, want %v", err, context.Canceled)
			}
		}
	})
}

func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}

func checkEnded(t *testing.T, ctx context.Context, want error) {
	t.Helper()
	if err := ctx.Err(); !errors.Is(err, want) {
		t.Errorf("Err = %v, want %v", err, want)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, want) {
		t.Errorf("Cause = %v, want %v", cause, want)
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case <-child.Done():
	default:
		t.Error("a child made after the end is not done")
	}
}
