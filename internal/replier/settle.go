package replier

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// settlement is what settle concluded about a notify whose outcome was
// unknown.
type settlement int

const (
	// settledDelivered: the notify is on the feed; the reply was marked
	// sent, and is to be acked.
	settledDelivered settlement = iota
	// settledNotDelivered: the feed proves it was not processed; the caller
	// may post again.
	settledNotDelivered
	// settledLater: nothing concluded yet; the reply is to be handed back.
	settledLater
)

// settle decides whether the latest notify of rec (at revision rev)
// arrived: it waits, in this process, until that post can no longer be in
// flight, then searches its window of the feed. Unless the notify was not
// delivered, the outcome finishes j.
//
// With lookFirst (the post was an earlier delivery's, maybe a process
// that died), a notify already on the feed settles it before the wait: a
// replier SIGKILLed after the platform wrote the row (the usual place, a
// post takes milliseconds) left its reply waiting out the post's whole
// timeout (30 s for a notify) for nothing. Only a notify not found yet has
// to wait: the platform may still be working on it. A post of this
// delivery whose outcome is unknown (a gateway error, a dropped
// connection) is not looked for first: the platform is most likely still
// on it, and the look would be one more feed read.
func (r *Replier) settle(runCtx context.Context, j *job, rec events.ReplyRecord, rev uint64, lookFirst bool) (settlement, stage.Outcome) {
	if until := r.inFlightUntil(rec); lookFirst && time.Until(until) > 0 {
		// Bounded by the flight: a feed that fails is retried inside the
		// check, and the wait below must not grow by it.
		ctx, cancel := r.reconcileContext(runCtx)
		ctx, cancelFlight := context.WithDeadline(ctx, until)
		found, err := r.reconcileNotify(ctx, j, rec)
		cancelFlight()
		cancel()
		if err == nil && found {
			return r.settled(runCtx, j, rec, rev)
		}
	}
	if handBack, ok := r.awaitFlight(runCtx, j, rec); !ok {
		return settledLater, handBack
	}
	ctx, cancel := r.reconcileContext(runCtx)
	found, err := r.reconcileNotify(ctx, j, rec)
	cancel()
	if err != nil {
		j.Log.WarnContext(ctx, "replier: cannot settle whether an earlier notify arrived; retrying later", "error", err)
		return settledLater, r.retry(j, molecule.RetryAfterOf(err), true, err)
	}
	if !found {
		return settledNotDelivered, stage.Outcome{}
	}
	return r.settled(runCtx, j, rec, rev)
}

// settled records a notify found on the feed as sent and acks it.
func (r *Replier) settled(runCtx context.Context, j *job, rec events.ReplyRecord, rev uint64) (settlement, stage.Outcome) {
	rec.State, rec.SentAt, rec.Reconciled = events.StateSent, time.Now().UTC(), true
	if !r.markSent(runCtx, j, rec, rev) {
		return settledLater, stage.Retry(0)
	}
	r.stats.reconciled.Add(1)
	j.Log.InfoContext(runCtx, "replier: earlier notify found on the feed; not posting again")
	return settledDelivered, r.ack(runCtx, j)
}

// reconcileContext bounds one check by ReconcileTimeout and by the run's
// deadline, but not by its cancellation: a clean stop lets a check finish.
func (r *Replier) reconcileContext(runCtx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), r.cfg.ReconcileTimeout)
	if dl, ok := runCtx.Deadline(); ok {
		inner, innerCancel := context.WithDeadline(ctx, dl)
		return inner, func() { innerCancel(); cancel() }
	}
	return ctx, cancel
}

// awaitFlight holds j until the latest post of rec can no longer be in
// flight (a process that died mid-post, or our own post whose outcome is
// unknown). The wait happens here, with the message kept alive, so it
// spends none of the reply's deliveries. Only when the run ends first (or
// its deadline cannot hold the wait) is the reply handed back, delayed to
// the end of the flight: false, with that outcome.
func (r *Replier) awaitFlight(runCtx context.Context, j *job, rec events.ReplyRecord) (stage.Outcome, bool) {
	until := r.inFlightUntil(rec)
	wait := time.Until(until)
	if wait <= 0 {
		return stage.Outcome{}, true
	}
	handBack := func() (stage.Outcome, bool) {
		return stage.Defer(max(time.Until(until), 0) + 100*time.Millisecond), false
	}
	if dl, ok := runCtx.Deadline(); ok && time.Until(dl) < wait+r.cfg.StartMargin {
		return handBack()
	}
	j.Log.DebugContext(runCtx, "replier: an earlier post may still be in flight; waiting it out", "wait", wait.Round(time.Millisecond))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return stage.Outcome{}, true
	case <-runCtx.Done():
		return handBack()
	}
}

// answered reports whether err is the platform's own answer, so the
// request is over and its effects (the notify row is written before the
// answer) are on the feed. A gateway's 502, 503 or 504 is not: the
// platform behind it may still be working on the request.
func answered(err error) bool {
	switch s := molecule.StatusOf(err); s {
	case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return false
	default:
		return s >= 500
	}
}

// unknownOutcome handles a post that may or may not have been processed.
// A peer reply is posted again later with the same messageId (the platform
// and a receiving relay de-duplicate on it). A canvas reply is settled at
// once against the feed: delivered means done; not delivered means the
// posting record is dropped and the reply retried with backoff, as any
// refused post.
func (r *Replier) unknownOutcome(runCtx context.Context, j *job, rev uint64, cause error) stage.Outcome {
	if j.route != events.RouteNotify {
		j.Log.WarnContext(runCtx, "replier: post outcome unknown; will post again with the same messageId", "error", cause)
		return r.retry(j, molecule.RetryAfterOf(cause), true, cause)
	}
	j.Log.WarnContext(runCtx, "replier: post outcome unknown; settling it against the feed", "error", cause, "status", molecule.StatusOf(cause))
	rec := j.rec
	if answered(cause) {
		rec.AnsweredAt = time.Now().UTC()
	}
	switch {
	case rev == 0:
		// A marked direct post: the stream's delivery must find the
		// posting record the mark stands for, so it is written now.
		rev = r.recordMark(runCtx, j, rec)
	case answered(cause):
		// Recorded so a redelivery after a crash does not wait either; if
		// the write fails, a redelivery waits for the deadline instead.
		ctx, cancel := r.run.OpContext(runCtx)
		if newRev, err := r.updateRecord(ctx, j.key, rec, rev); err == nil {
			rev = newRev
		}
		cancel()
	}
	if j.direct {
		// The dispatcher's slot does not wait out the flight: the stream's
		// delivery of the reply finds this posting record and settles it.
		return r.retry(j, molecule.RetryAfterOf(cause), true, cause)
	}
	if settled, o := r.settle(runCtx, j, rec, rev, false); settled != settledNotDelivered {
		return o
	}
	r.forgetPosting(runCtx, j, rev)
	j.Log.InfoContext(runCtx, "replier: the feed shows the notify was not delivered; retrying it later")
	return r.retry(j, molecule.RetryAfterOf(cause), false, cause)
}

// recordMark creates the posting record of a marked direct post whose
// outcome is unknown (rec: the mark's, with the platform's answer time)
// and returns its revision. A record that exists is left as it is: a
// redelivery of the inbound message wrote it from the same mark, or the
// reply was settled since. If it cannot be written the job is unrecorded
// (the runner retries the inbound message instead of publishing the reply).
func (r *Replier) recordMark(runCtx context.Context, j *job, rec events.ReplyRecord) uint64 {
	ctx, cancel := r.run.OpContext(runCtx)
	defer cancel()
	rev, err := r.createRecord(ctx, j.key, rec)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		j.unrecorded = true
		j.Log.ErrorContext(ctx, "replier: posting record of a direct post whose outcome is unknown not written; the inbound message's redelivery writes it", "error", err)
	}
	return rev
}
