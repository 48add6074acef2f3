package stage

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Outcome is what a stage's step says should happen to its message once
// the step returned: ack it, retry it later, defer it, dead-letter it, or
// leave it as it is. A step never finishes a message itself; the Runner
// applies the outcome in one place (finish), so the effects that come
// before it (records, publishes, posts) are all done when the message is
// acked, and every way a message ends is counted and logged the same way.
//
// Build one with Ack, Retry, Defer, DeadLetter, Abandon or Deliver (a
// reply to deliver, then an ack). The zero
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
	// reply: Deliver's.
	reply *Reply
}

type outcomeKind uint8

const (
	outcomeNone outcomeKind = iota
	outcomeAck
	outcomeRetry
	outcomeDefer
	outcomeDeadLetter
	outcomeAbandon
	outcomeDeliver
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
// after its AckWait. Only a crash point (internal/stage/crashpoint), which
// stands for a process that died right there, abandons a message.
func Abandon() Outcome { return Outcome{kind: outcomeAbandon} }

// Acked says whether o acknowledges its message: what a direct post
// (ReplyDelivery.PostDirect) reports as done.
func (o Outcome) Acked() bool { return o.kind == outcomeAck }

// Abandoned says whether o is Abandon: a crash point stopped the work, and
// whoever called the step must stop too.
func (o Outcome) Abandoned() bool { return o.kind == outcomeAbandon }

// DeadLetterReason is o's reason and cause when o is DeadLetter (ok).
func (o Outcome) DeadLetterReason() (reason string, cause error, ok bool) {
	return o.reason, o.cause, o.kind == outcomeDeadLetter
}

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
	case outcomeDeliver:
		return "deliver"
	}
	return "none"
}

// LastDelivery says whether d is the consumer's last allowed delivery of
// its message (MaxDeliver reached): a retry would then never come, so a
// failure should be dead-lettered instead.
func (r *Runner) LastDelivery(d *Delivery) bool {
	return r.maxDeliver > 0 && d.Meta.NumDelivered >= uint64(r.maxDeliver)
}

// MaxDeliver is the consumer's delivery limit (0: none).
func (r *Runner) MaxDeliver() int { return r.maxDeliver }

// finish applies o, the outcome a stage's step returned for d: the one
// place where a message of a stage is finished.
func (r *Runner) finish(runCtx context.Context, d *Delivery, o Outcome) {
	switch o.kind {
	case outcomeAck:
		r.ack(runCtx, d, o.lost)
	case outcomeRetry:
		r.retry(d, o.delay)
	case outcomeDefer:
		r.deferMsg(d, o.delay)
	case outcomeDeadLetter:
		r.deadLetter(runCtx, d, o.reason, o.cause)
	case outcomeDeliver:
		r.finish(runCtx, d, r.deliver(runCtx, d, o.reply))
	case outcomeAbandon:
	default:
		r.log.ErrorContext(runCtx, r.target.Stage+": a step returned no outcome; the message is left to its AckWait (a bug)", "subject", d.Msg.Subject())
	}
}

// retry naks d with the backoff of its delivery count (RetryDelay), or
// with atLeast when that is longer (a platform's Retry-After), capped at
// RetryMax. Plain Nak ignores the consumer's BackOff (nats-server#4726),
// so the delay is explicit.
func (r *Runner) retry(d *Delivery, atLeast time.Duration) {
	delay := RetryDelay(r.cfg.RetryBase, r.cfg.RetryMax, d.Meta.NumDelivered)
	if atLeast > delay {
		delay = min(atLeast, r.cfg.RetryMax)
	}
	r.stats.retried.Add(1)
	_ = d.Msg.NakWithDelay(delay)
}

// deferMsg hands d back without spending effort on it, because the run's
// deadline leaves no room (start-margin rule): at once (delay 0) for
// another worker, or after delay. It counts as deferred.
func (r *Runner) deferMsg(d *Delivery, delay time.Duration) {
	r.stats.deferred.Add(1)
	if delay <= 0 {
		_ = d.Msg.Nak()
		return
	}
	_ = d.Msg.NakWithDelay(delay)
}

// ack acknowledges d. With ConfirmAcks (a replicated cluster) it waits for
// the server to confirm it (a double ack), trying again (RetryRequest) until it is confirmed or StoreTimeout
// passes; the message is kept alive meanwhile.
//
// A plain ack is fire-and-forget. On a cluster, an ack that reaches a
// consumer leader which dies before replicating it, or that is written on
// a connection to a node being killed, is lost without an error: the
// message came back AckWait later to a stage that found the outcome
// record and acked it again (measured: 876 of 2,000 inbound messages and
// 883 replies redelivered after being handled, under rolling node
// restarts). The confirmation costs one round trip; a retry reaches the
// new leader, and acking a message already acked is confirmed too. Every
// stage writes its outcome record (handled, sent) before it acks, so an
// ack that still fails only brings a redelivery that the record turns into
// a no-op; lost says what that redelivery will find.
func (r *Runner) ack(runCtx context.Context, d *Delivery, lost string) {
	log := d.Log
	if log == nil {
		log = r.log
	}
	if !r.cfg.ConfirmAcks {
		if err := d.Msg.Ack(); err != nil {
			log.WarnContext(runCtx, r.target.Stage+": ack not sent; a redelivery will find "+lost, "error", err)
		}
		return
	}
	ctx, cancel := r.OpContext(runCtx)
	defer cancel()
	err := RetryRequest(ctx, func(ctx context.Context) error {
		err := d.Msg.DoubleAck(ctx)
		if errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil // an earlier try was confirmed
		}
		return err
	})
	if err != nil {
		log.WarnContext(ctx, r.target.Stage+": ack not confirmed; a redelivery will find "+lost, "error", err)
	}
}

// deadLetter publishes a dead letter for d with reason and cause, then
// terminates the message. If the dead letter cannot be written the message
// is retried instead, so nothing is dropped.
func (r *Runner) deadLetter(runCtx context.Context, d *Delivery, reason string, cause error) {
	msg, meta := d.Msg, d.Meta
	dl := events.DeadLetter{
		Stage:           r.target.Stage,
		WorkspaceID:     dlq.WorkspaceOfSubject(msg.Subject()),
		ActivityID:      d.ActivityID,
		Reason:          reason,
		Error:           errorText(cause),
		Deliveries:      meta.NumDelivered,
		OriginalSubject: msg.Subject(),
		OriginalStream:  meta.Stream,
		OriginalSeq:     meta.Sequence.Stream,
		Envelope:        dlq.EnvelopeOf(msg.Data()),
	}
	if d.WorkspaceID != "" {
		dl.WorkspaceID = d.WorkspaceID
	}
	ctx, cancel := r.OpContext(runCtx)
	defer cancel()
	seq, _, err := dlq.PublishStored(ctx, r.js, dl)
	if err != nil {
		r.log.ErrorContext(ctx, r.target.Stage+": dead letter not written; retrying the message", "subject", msg.Subject(), "reason", reason, "error", err)
		r.retry(d, 0)
		return
	}
	r.stats.deadLettered.Add(1)
	// Why is reason; the error is the stage's line before this one (a
	// handler's whole error may quote the message: it is in the dead letter).
	r.log.WarnContext(ctx, r.target.Stage+": message dead-lettered", "workspace", dl.WorkspaceID, "activity", dl.ActivityID, "reason", reason, "deliveries", meta.NumDelivered,
		"dlq_seq", seq, "action", dlq.Action(seq))
	if err := msg.TermWithReason(reason); err == nil {
		r.stats.terminated.Add(1)
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
