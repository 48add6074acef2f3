package stage

import (
	"context"
	"time"
)

// Outcome is what a stage's step says should happen to its message once
// the step returned: ack it, retry it later, defer it, dead-letter it, or
// leave it as it is. A step never finishes a message itself; the Runner
// applies the outcome in one place (finish), so the effects that come
// before it (records, publishes, posts) are all done when the message is
// acked, and every way a message ends is counted and logged the same way.
//
// Build one with Ack, Retry, Defer, DeadLetter or Abandon. The zero
// Outcome is not valid: a step that returns it is a bug, which is logged,
// and its message is left to its AckWait like an abandoned one.
type Outcome struct {
	kind outcomeKind
	// delay: Retry's least delay (a platform's Retry-After), Defer's delay.
	delay time.Duration
	// lost: Ack's "what a redelivery will find" should the ack be lost.
	lost string
	// reason and cause: DeadLetter's.
	reason string
	cause  error
}

type outcomeKind uint8

const (
	outcomeNone outcomeKind = iota
	outcomeAck
	outcomeRetry
	outcomeDefer
	outcomeDeadLetter
	outcomeAbandon
)

// Ack acknowledges the message. lost names the outcome record a
// redelivery will find should the ack itself be lost ("the handled
// record"): it is logged with the failed ack. See Runner.finish for how
// an ack is confirmed on a replicated cluster.
func Ack(lost string) Outcome { return Outcome{kind: outcomeAck, lost: lost} }

// Retry naks the message for a redelivery after the backoff of its
// delivery count (RetryDelay), or after atLeast when that is longer (a
// platform's Retry-After), capped at RetryMax. It counts as retried.
func Retry(atLeast time.Duration) Outcome { return Outcome{kind: outcomeRetry, delay: atLeast} }

// Defer hands the message back without spending effort on it (the run's
// deadline or stop leaves no room): at once (delay 0) for another worker,
// or after delay. It counts as deferred.
func Defer(delay time.Duration) Outcome { return Outcome{kind: outcomeDefer, delay: delay} }

// DeadLetter publishes a dead letter with reason (an events.Reason...)
// and cause, then terminates the message. If the dead letter cannot be
// written the message is retried instead, so nothing is dropped.
func DeadLetter(reason string, cause error) Outcome {
	return Outcome{kind: outcomeDeadLetter, reason: reason, cause: cause}
}

// Abandon leaves the message as it is: no ack, nak or term. It comes back
// after its AckWait. Only a crash point (pkg/stage/crashpoint), which
// stands for a process that died right there, abandons a message.
func Abandon() Outcome { return Outcome{kind: outcomeAbandon} }

// String names the outcome, for logs and tests.
func (o Outcome) String() string {
	switch o.kind {
	case outcomeAck:
		return "ack"
	case outcomeRetry:
		return "retry"
	case outcomeDefer:
		return "defer"
	case outcomeDeadLetter:
		return "dead-letter " + o.reason
	case outcomeAbandon:
		return "abandon"
	}
	return "none"
}

// Step is a stage's work on one message m and says how it is to be
// finished. M is the raw *Delivery for the step the Runner calls, or a
// stage's own decoded form of it for the steps behind its decoding.
//
// ctx is the run's context: it ends when the run is stopped, and work in
// flight should then still finish (see Runner.OpContext).
type Step[M any] func(ctx context.Context, m M) Outcome

// Wrap is one middleware of a stage: a cross-cutting step (tracing,
// de-duplication, admission, ...) that either returns an outcome of its
// own or calls next.
type Wrap[M any] func(next Step[M]) Step[M]

// Steps puts step behind wraps, the first one outermost: a stage's
// middleware, declared once as one list that reads in the order a message
// meets it.
func Steps[M any](step Step[M], wraps ...Wrap[M]) Step[M] {
	for i := len(wraps) - 1; i >= 0; i-- {
		step = wraps[i](step)
	}
	return step
}
