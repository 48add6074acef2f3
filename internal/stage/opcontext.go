package stage

import (
	"context"
	"sync"
	"time"
)

// opContext is the context of Runner.OpContext: the run context's values
// without its cancellation, ending StoreTimeout after it was made. It is
// context.WithTimeout(context.WithoutCancel(runCtx), StoreTimeout) without
// that context's runtime timer until something waits on it.
//
// Almost every operation of a message is a RetryRequest whose tries each
// carry their own timer, at most AttemptTimeout ahead, which attempt caps
// at the operation's deadline; a timer of the operation's own would only
// fire after every try's. A message passes through about eight operations,
// and their timers, contexts and cancel functions were a tenth of the
// relay's allocations (docs/performance.md, "Per-operation deadlines and
// the turn encoder").
//
// Whatever asks for Done (a select between tries, a request made without
// RetryRequest, a child context) gets the stdlib context it stands for,
// made then with the same deadline: from then on every method is that
// context's, so a child registers with it as with any cancelCtx.
type opContext struct {
	values   context.Context // context.WithoutCancel(runCtx): values only
	deadline time.Time

	mu     sync.Mutex
	timed  context.Context    // the stdlib context, once Done was asked for
	cancel context.CancelFunc // timed's
	err    error              // the end, while timed is nil
	// try cancels the RetryRequest try in flight (attempt), so that
	// cancelling the operation cuts it short as it would a child.
	try context.CancelFunc
}

// closedDone is the Done channel of an opContext that ended before anything
// asked for its Done.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newOpContext(runCtx context.Context, timeout time.Duration) (*opContext, context.CancelFunc) {
	c := &opContext{values: context.WithoutCancel(runCtx), deadline: time.Now().Add(timeout)}
	return c, c.end
}

func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *opContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed == nil {
		if c.endedLocked() != nil {
			return closedDone
		}
		c.timed, c.cancel = context.WithDeadline(c.values, c.deadline)
	}
	return c.timed.Done()
}

func (c *opContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed != nil {
		return c.timed.Err()
	}
	return c.endedLocked()
}

func (c *opContext) Value(key any) any {
	c.mu.Lock()
	timed := c.timed
	c.mu.Unlock()
	if timed != nil {
		// Its cancelCtx answers the key context's children look it up by.
		return timed.Value(key)
	}
	return c.values.Value(key)
}

func (c *opContext) String() string { return "stage.OpContext" }

// endedLocked is Err while no timer runs: the deadline is read off the
// clock.
func (c *opContext) endedLocked() error {
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.err = context.DeadlineExceeded
	}
	return c.err
}

// end is the operation's CancelFunc.
func (c *opContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.try != nil {
		c.try()
	}
	if c.timed != nil {
		c.cancel()
		return
	}
	if c.endedLocked() == nil {
		c.err = context.Canceled
	}
}

// attempt is the context of one RetryRequest try inside ctx: at most
// timeout, and never past ctx's end. Inside an opContext it carries the
// try's own timer at the earlier of the two deadlines and leaves the
// operation's untouched; endAttempt(c, cancel) ends it.
func attempt(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, *opContext) {
	c, ok := ctx.(*opContext)
	if !ok {
		actx, cancel := context.WithTimeout(ctx, timeout)
		return actx, cancel, nil
	}
	c.mu.Lock()
	if c.try != nil || c.endedLocked() != nil {
		c.mu.Unlock()
		// Another try in flight on it (concurrent RetryRequests), or the
		// end: the stdlib's way, which asks c for its Done.
		actx, cancel := context.WithTimeout(ctx, timeout)
		return actx, cancel, nil
	}
	defer c.mu.Unlock()
	dl := time.Now().Add(timeout)
	if c.deadline.Before(dl) {
		dl = c.deadline
	}
	actx, cancel := context.WithDeadline(c.values, dl)
	c.try = cancel
	return actx, cancel, c
}

// endAttempt ends a try made by attempt.
func endAttempt(c *opContext, cancel context.CancelFunc) {
	cancel()
	if c != nil {
		c.mu.Lock()
		c.try = nil
		c.mu.Unlock()
	}
}
