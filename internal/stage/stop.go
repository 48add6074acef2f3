package stage

import (
	"context"
	"time"
)

type stopLimitKey struct{}

// WithStopLimit returns ctx carrying limit, the end of a graceful stop's
// grace for the work in flight: a run's context ends when the stop begins
// (no new work is taken), and the work that outlives it (a handler, see
// Detach) ends when limit ends. Without a stop limit that work is bounded
// only by its own timeout.
func WithStopLimit(ctx, limit context.Context) context.Context {
	return context.WithValue(ctx, stopLimitKey{}, limit)
}

// Detach returns a context for work that must outlive a stop of runCtx
// (a handler in flight finishes after the stop began): it keeps runCtx's
// values, does not end with runCtx, and ends at deadline or when
// runCtx's stop limit (WithStopLimit) ends, whichever comes first.
func Detach(runCtx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(runCtx), deadline)
	limit, ok := runCtx.Value(stopLimitKey{}).(context.Context)
	if !ok {
		return ctx, cancel
	}
	ctx, cancelCause := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(limit, func() { cancelCause(ErrStopGraceOver) })
	return ctx, func() {
		unhook()
		cancelCause(nil)
		cancel()
	}
}

// StopGraceOver says whether ctx (from Detach) was ended by the stop
// limit: the work was cut because the stop's grace ran out.
func StopGraceOver(ctx context.Context) bool {
	return context.Cause(ctx) == ErrStopGraceOver
}
