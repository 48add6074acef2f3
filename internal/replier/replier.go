// Package replier is the stage that delivers replies to the platform: a
// canvas user's (or a self-message's) reply goes to POST
// /workspaces/:self/notify, a peer's to POST /workspaces/:peer/a2a with a
// messageId derived from the inbound activity id and
// metadata.in_reply_to.
//
// A reply is posted at most once where the platform cannot de-duplicate.
// Before the POST the replier creates a "posting" record (events.ReplyKey
// in events.BucketReplies); after the platform accepted it the record says
// "sent"; only then is the message acked. (A canvas reply posted directly,
// by the dispatcher's stage runner in the same process, has its posting
// record in the dispatcher's handled record, the posting mark: PostDirect
// writes only the sent record, direct.go.) A redelivery reads the record
// first (a first delivery, which almost never has one, learns of one from
// the posting record's create-only write instead) and finds:
//   - "sent": ack, nothing posted;
//   - "posting" (the stage died between the POST and the "sent" record, or
//     the POST's outcome is unknown): a peer reply is posted again with the
//     same messageId, which a receiving relay de-duplicates on; a canvas
//     reply is reconciled against the workspace's own feed, where the
//     platform writes the notify row before it answers (docs/protocol.md
//     §6). The record holds the post's start and deadline; once the post
//     cannot be in flight any more (waited out in-process, spending no
//     delivery), only that window of the feed is searched (reconcile.go):
//     a matching row means it was delivered (mark sent, ack), none means
//     it was not (post). If the feed cannot be read the reply waits; it is
//     never guessed.
package replier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrNoClient: a reply for a workspace this replier holds no client
// (token) for. Permanent: configure the workspace and replay.
var ErrNoClient = errors.New("replier: no platform client for the reply's workspace")

// Replier posts replies. It holds no state between runs beyond counters,
// so any number of Repliers in any number of processes can share the work.
// It is safe for concurrent use.
type Replier struct {
	js      jetstream.JetStream
	topo    *events.Topology
	clients map[string]*molecule.Client
	cfg     Config
	log     *slog.Logger
	run     *stage.Runner
	stats   counters
	// work is chain, built once: a reply's work after its decode.
	work stage.Step[*job]
}

// New validates cfg, applies its defaults and returns a Replier. clients
// maps a workspace id to the client holding that workspace's token; the
// reply's WorkspaceID picks it, so a reply is always posted with its own
// workspace's token. The map must not be changed afterwards. New makes no
// request.
func New(js jetstream.JetStream, topo *events.Topology, clients map[string]*molecule.Client, cfg Config) (*Replier, error) {
	if js == nil || topo == nil || topo.Replier == nil || topo.Replies == nil {
		return nil, fmt.Errorf("%w: need a JetStream handle and a topology with the replier consumer and replies bucket", ErrInvalidConfig)
	}
	if len(clients) == 0 && cfg.Lookup == nil {
		return nil, fmt.Errorf("%w: no platform clients", ErrInvalidConfig)
	}
	for ws, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("%w: nil client for workspace %s", ErrInvalidConfig, ws)
		}
	}
	cfg.SetDefaults()
	r := &Replier{js: js, topo: topo, clients: clients}
	r.work = r.chain()
	run, err := stage.Open(js, dlq.ReplierTarget(topo), &cfg.Config, topo.Config.ReplierAckWait, topo.Config.ReplierMaxDeliver,
		r.admit, r.steps())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := cfg.Validate(0); err != nil {
		return nil, err
	}
	r.cfg, r.run, r.log = cfg, run, run.Logger()
	return r, nil
}

// Config returns the effective configuration (defaults applied).
func (r *Replier) Config() Config { return r.cfg }

// InFlight is how many replies this Replier is working on now.
func (r *Replier) InFlight() int { return r.run.InFlight() }

// Stats returns the counters since New.
func (r *Replier) Stats() Stats { return r.stats.snapshot(r.run.Stats()) }

// Run posts replies until ctx ends, then stops fetching, lets the posts in
// flight finish and returns nil. Replies that exhaust their deliveries
// unacknowledged are swept to the dead-letter stream while it runs. It
// returns an error only if the NATS connection is closed under it.
func (r *Replier) Run(ctx context.Context) error { return r.run.Run(ctx) }

// Drain posts replies until the queue has stayed empty for idle (if not
// set, 1 second) with nothing in flight, or ctx ends, or — when ctx has a
// deadline — the deadline leaves no room for a post (the longer of
// NotifyTimeout and MinA2ATimeout + A2AGrace, plus StartMargin), counting
// the wait for the first workspace whose rate budget allows one (see
// admit). It waits for the posts in flight and returns the counts of
// this drain. It first sweeps replies that exhausted their deliveries.
func (r *Replier) Drain(ctx context.Context, idle time.Duration) (Stats, error) {
	before := r.Stats()
	_, err := r.run.Drain(ctx, idle)
	return r.Stats().sub(before), err
}

// DrainUntilEmpty is Drain for a queue nothing else adds to meanwhile
// (connect --once, after its dispatcher drained): it ends as soon as the
// queue is empty and nothing is in flight; idle bounds only the wait for
// a reply still queued but not redelivered yet
// (stage.Runner.DrainUntilEmpty).
func (r *Replier) DrainUntilEmpty(ctx context.Context, idle time.Duration) (Stats, error) {
	before := r.Stats()
	_, err := r.run.DrainUntilEmpty(ctx, idle)
	return r.Stats().sub(before), err
}

// admit implements the start-margin rule for the pull loop: with a ctx
// deadline, a pull may only wait until the last moment a post can still be
// started, and none is made when no client's rate budget allows a post
// before that moment (every reply taken would be handed back unposted,
// spending a delivery). One durable consumer carries the replies of all
// workspaces, so a pull cannot pick them by workspace: while any budget
// allows a post, replies are taken, and one whose own budget does not is
// handed back by budgeted until its window resets.
func (r *Replier) admit(left time.Duration) time.Duration {
	left -= r.minPostWindow()
	if left > 0 && r.budgetWait() > left {
		return 0
	}
	return left
}

// budgetWait is how long until some client's rate budget allows a post
// (the least molecule.Client.BudgetWait); it spends nothing.
func (r *Replier) budgetWait() time.Duration {
	least := time.Duration(-1)
	for _, c := range r.clients {
		d := c.BudgetWait(r.cfg.RateReserve)
		if d <= 0 {
			return 0
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return least
}

// minPostWindow is the least time a post of either route needs: a notify
// its NotifyTimeout, a peer reply MinA2ATimeout plus A2AGrace. A drain
// under a deadline takes no reply it could not start (roomToPost).
func (r *Replier) minPostWindow() time.Duration {
	return max(r.cfg.NotifyTimeout, MinA2ATimeout+A2AGrace)
}

// isSent says whether j's reply record says sent.
func (r *Replier) isSent(runCtx context.Context, j *job) bool {
	ctx, cancel := r.run.OpContext(runCtx)
	rec, _, found, err := r.getRecord(ctx, j.key)
	cancel()
	return err == nil && found && rec.State == events.StateSent
}

// ackSent acks a redelivery of a reply that was sent.
func (r *Replier) ackSent(runCtx context.Context, j *job) stage.Outcome {
	r.stats.duplicates.Add(1)
	j.Log.InfoContext(runCtx, "replier: reply already sent; acking the redelivery")
	return r.ack(runCtx, j)
}

// sleepBudget waits d for the rate budget; false when the run stopped
// first (the reply is then handed back).
func (r *Replier) sleepBudget(runCtx context.Context, j *job, d time.Duration) bool {
	j.Log.DebugContext(runCtx, "replier: rate budget at reserve; waiting for the window to reset", "wait", d.Round(time.Millisecond))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-runCtx.Done():
		return false
	}
}

// A2AGrace is how long after its X-Timeout the replier still waits for
// the platform's answer to an /a2a post. The platform stops dispatching at
// X-Timeout and answers 202 queued (a success); were our own timeout to
// fire first, the outcome would be unknown and posting again would deliver
// the message twice (docs/protocol.md §6).
const A2AGrace = 10 * time.Second

// MinA2ATimeout is the shortest X-Timeout an /a2a post is started with
// when the run's deadline forces a shorter one than Config.A2ATimeout.
const MinA2ATimeout = 5 * time.Second

// roomToPost applies the start-margin rule to one reply; false means it
// must be handed back. Under a deadline (a Lambda invocation) a peer
// reply's X-Timeout is shortened to what is left, down to MinA2ATimeout:
// a push peer that takes longer gets the message from the platform's
// queue, which de-duplicates on messageId.
func (r *Replier) roomToPost(runCtx context.Context, j *job) bool {
	var ok bool
	j.xTimeout, ok = r.postFits(runCtx, j, 0)
	return ok
}

// postFits says whether a post of j started after a wait of after still
// meets the start-margin rule, and with which /a2a X-Timeout.
func (r *Replier) postFits(runCtx context.Context, j *job, after time.Duration) (xTimeout time.Duration, ok bool) {
	xTimeout = r.cfg.A2ATimeout
	dl, ok := runCtx.Deadline()
	if !ok {
		return xTimeout, true
	}
	left := time.Until(dl) - after - r.cfg.StartMargin
	if j.route == events.RouteA2A {
		if fit := (left - A2AGrace).Truncate(time.Second); fit < xTimeout {
			xTimeout = fit
		}
		return xTimeout, xTimeout >= MinA2ATimeout
	}
	return xTimeout, left >= r.cfg.NotifyTimeout
}

// postTimeout bounds one post of j: the notify timeout, or the /a2a
// X-Timeout (in whole seconds, as sent) plus A2AGrace.
func (r *Replier) postTimeout(j *job) time.Duration {
	if j.route == events.RouteA2A {
		return (j.xTimeout + time.Second - 1).Truncate(time.Second) + A2AGrace
	}
	return r.cfg.NotifyTimeout
}

// resume continues a reply whose record says a post may have happened.
func (r *Replier) resume(runCtx context.Context, j *job, rec events.ReplyRecord, rev uint64) stage.Outcome {
	if j.route == events.RouteNotify {
		if settled, o := r.settle(runCtx, j, rec, rev, true); settled != settledNotDelivered {
			return o
		}
		j.Log.InfoContext(runCtx, "replier: earlier notify not on the feed; posting it")
	}
	if !r.roomToPost(runCtx, j) {
		return stage.Defer(0)
	}
	now := time.Now().UTC()
	rec.State, rec.PostingAt, rec.Deadline, rec.AnsweredAt = events.StatePosting, now, now.Add(r.postTimeout(j)), time.Time{}
	rec.Attempts++
	ctx, cancel := r.run.OpContext(runCtx)
	newRev, err := r.updateRecord(ctx, j.key, rec, rev)
	cancel()
	if err != nil {
		j.Log.WarnContext(ctx, "replier: posting record not updated; retrying later", "error", err)
		return r.retry(j, 0, true, err)
	}
	r.stats.reposted.Add(1)
	return r.post(runCtx, j, rec, newRev)
}

// post sends the reply; rec is the posting record at revision rev (0: a
// marked direct post, whose posting record is the handled record's mark).
func (r *Replier) post(runCtx context.Context, j *job, rec events.ReplyRecord, rev uint64) stage.Outcome {
	j.rec = rec
	if crashpoint.Hit(runCtx, crashpoint.ReplierOf(runCtx).BeforePost, j.rep) {
		return stage.Abandon()
	}
	// A post outlives a cancelled run context (a clean stop lets it
	// finish), bounded by the deadline its posting record promises: a
	// delivery that finds the record waits until then, then trusts the
	// feed. (A marked post's record was written before the rate budget
	// and the room check, so its own timeout would end later.)
	ctx, cancel := context.WithDeadline(context.WithoutCancel(runCtx), rec.Deadline)
	ctx, span := tracing.Start(ctx, "post", trace.SpanKindClient, attribute.String("molecule.route", j.route),
		attribute.String("molecule.activity_id", j.rep.ActivityID))
	start := time.Now()
	err := r.send(ctx, j)
	r.observePost(j, start, err)
	span.End()
	cancel()
	if err != nil && classifyRefusal(j.route, err).verdict == delivered {
		j.Log.InfoContext(ctx, "replier: the platform answered an error but confirmed the peer received the reply", "error", err)
		err = nil
	}
	if err != nil {
		r.stats.postErrors.Add(1)
		return r.postFailed(runCtx, j, rev, err)
	}
	if crashpoint.Hit(runCtx, crashpoint.ReplierOf(runCtx).AfterPost, j.rep) {
		return stage.Abandon()
	}
	rec.State, rec.SentAt = events.StateSent, time.Now().UTC()
	if !r.markSent(runCtx, j, rec, rev) {
		return stage.Retry(0)
	}
	if j.route == events.RouteA2A {
		r.stats.sentA2A.Add(1)
	} else {
		r.stats.notified.Add(1)
	}
	if crashpoint.Hit(runCtx, crashpoint.ReplierOf(runCtx).AfterSent, j.rep) {
		return stage.Abandon()
	}
	// The milestone line (stage.Config.LogMessages): sizes, not the text;
	// the job's logger names the route (notify or a2a) and direct.
	j.Log.Log(ctx, r.cfg.MessageLevel(), "replier: reply posted", "post_ms", time.Since(start).Milliseconds(),
		"text_bytes", len(j.rep.Text), "attachments", len(j.rep.Attachments))
	j.Log.DebugContext(ctx, "replier: reply delivered", "text", j.rep.Text)
	return r.ack(runCtx, j)
}

// observePost counts a post that started at start and, when it succeeded,
// the reply's end-to-end latency.
func (r *Replier) observePost(j *job, start time.Time, err error) {
	now := time.Now()
	r.stats.post.Observe(now.Sub(start))
	if o := r.cfg.Observer; o != nil {
		o.ObservePost(j.route, now.Sub(start))
		if err == nil {
			o.ObserveDelivered(j.route, j.rep.InboundCreatedAt, now)
		}
	}
}

func (r *Replier) send(ctx context.Context, j *job) error {
	if j.route == events.RouteNotify {
		if f := r.cfg.BeforeNotify; f != nil {
			f(j.rep.WorkspaceID, j.rep.Text)
		}
		_, err := j.client.Notify(ctx, j.rep.Text, events.MoleculeAttachments(j.rep.Attachments))
		return err
	}
	msgID := j.rep.MessageID
	if msgID == "" {
		msgID = events.ReplyMessageID(j.rep.ActivityID)
	}
	meta := map[string]any{"relay_hops": j.rep.Hops}
	if j.rep.InReplyToMessageID != "" {
		meta["in_reply_to_message_id"] = j.rep.InReplyToMessageID
	}
	res, err := j.client.SendA2A(ctx, molecule.A2AMessage{
		To:          j.rep.TargetWorkspaceID,
		Text:        j.rep.Text,
		MessageID:   msgID,
		InReplyTo:   j.rep.ActivityID,
		ContextID:   j.rep.ContextID,
		TaskID:      j.rep.TaskID,
		Metadata:    meta,
		Attachments: events.MoleculeAttachments(j.rep.Attachments),
		Timeout:     j.xTimeout,
	})
	if err == nil && !res.Queued {
		// A push-mode peer answered synchronously; its answer reaches us
		// (if at all) through our own feed, not through this call.
		j.Log.DebugContext(ctx, "replier: peer answered synchronously", "status", res.StatusCode, "body", string(res.Body))
	}
	return err
}

func (r *Replier) postFailed(runCtx context.Context, j *job, rev uint64, err error) stage.Outcome {
	rf := classifyRefusal(j.route, err)
	cause := err
	if rf.reason != "" {
		cause = fmt.Errorf("%s: %w", rf.reason, err)
	}
	switch rf.verdict {
	case permanentFailure:
		r.forgetPosting(runCtx, j, rev)
		j.refused = j.direct
		j.Log.WarnContext(runCtx, "replier: the platform refused the reply permanently; dead-lettering it", "error", err, "status", molecule.StatusOf(err), "action", rf.reason)
		return stage.DeadLetter(events.ReasonPermanent, cause)
	case refusedForNow:
		r.forgetPosting(runCtx, j, rev)
		if j.Meta.NumDelivered >= RefusalRetries {
			j.Log.WarnContext(runCtx, "replier: the platform kept refusing the reply; dead-lettering it", "error", err, "deliveries", j.Meta.NumDelivered, "action", rf.reason)
			return stage.DeadLetter(events.ReasonPermanent, cause)
		}
		j.Log.WarnContext(runCtx, "replier: the platform refused the reply; retrying a few times before dead-lettering it", "error", err, "deliveries", j.Meta.NumDelivered, "of", RefusalRetries)
		return r.retry(j, molecule.RetryAfterOf(err), false, cause)
	case notDelivered:
		r.forgetPosting(runCtx, j, rev)
		j.Log.WarnContext(runCtx, "replier: post refused for now; retrying later", "error", err, "retry_after", molecule.RetryAfterOf(err))
		return r.retry(j, molecule.RetryAfterOf(err), false, err)
	default:
		return r.unknownOutcome(runCtx, j, rev, err)
	}
}

// forgetPosting deletes the posting record after an answer that proves the
// request was not processed, so the next attempt posts without first
// reconciling. A failure to delete is harmless: reconciliation then finds
// nothing and posts.
func (r *Replier) forgetPosting(runCtx context.Context, j *job, rev uint64) {
	if rev == 0 {
		return // a marked direct post: no posting record in the bucket
	}
	ctx, cancel := r.run.OpContext(runCtx)
	defer cancel()
	if err := r.topo.Replies.Delete(ctx, j.key, jetstream.LastRevision(rev)); err != nil {
		j.Log.DebugContext(ctx, "replier: posting record not deleted", "error", err)
	}
}

// retry is a later redelivery of j, or its dead letter on the last
// allowed delivery. mayBeDelivered says a canvas reply's outcome is
// unknown (the dead letter is then ReasonAmbiguous; settle only leaves it
// unknown when the feed could not be read, and cause says so).
func (r *Replier) retry(j *job, retryAfter time.Duration, mayBeDelivered bool, cause error) stage.Outcome {
	if r.run.LastDelivery(j.Delivery) {
		reason := events.ReasonMaxDeliveries
		if mayBeDelivered && j.route == events.RouteNotify {
			reason = events.ReasonAmbiguous
		}
		return stage.DeadLetter(reason, cause)
	}
	return stage.Retry(retryAfter)
}

// markSent records that the reply was delivered: an update of the posting
// record at rev, or, for a marked direct post (rev 0), a create. It
// returns false (the reply is to be retried) when the record could not be
// written: the redelivery then finds "posting" (for a marked post, the
// inbound message's redelivery writes it from the mark) and reconciles or
// re-posts with the same messageId.
func (r *Replier) markSent(runCtx context.Context, j *job, rec events.ReplyRecord, rev uint64) bool {
	ctx, cancel := r.run.OpContext(runCtx)
	defer cancel()
	data, err := rec.Marshal()
	if err == nil {
		err = stage.RetryRequest(ctx, func(ctx context.Context) error {
			var err error
			if rev == 0 {
				_, err = r.topo.Replies.Create(ctx, j.key, data)
			} else {
				_, err = r.topo.Replies.Update(ctx, j.key, data, rev)
			}
			if err != nil && (isWrongRevision(err) || errors.Is(err, jetstream.ErrKeyExists)) {
				// Someone else wrote the record meanwhile (for a marked
				// post, a redelivery of the inbound message wrote the
				// posting record from the mark; or our own create was
				// retried after a lost answer); we know the reply was
				// delivered, so say so.
				_, err = r.topo.Replies.Put(ctx, j.key, data)
			}
			return err
		})
	}
	if err != nil {
		j.unrecorded = j.marked
		j.Log.ErrorContext(ctx, "replier: reply delivered but not recorded as sent; the redelivery will reconcile", "error", err)
		return false
	}
	return true
}

func isWrongRevision(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }

// ack records a sent reply's turns in memory, then acks it (a lost ack is
// harmless: the redelivery finds "sent").
func (r *Replier) ack(runCtx context.Context, j *job) stage.Outcome {
	r.remember(runCtx, j)
	return stage.Ack("the sent record")
}

func (r *Replier) getRecord(ctx context.Context, key string) (events.ReplyRecord, uint64, bool, error) {
	var rec events.ReplyRecord
	entry, err := stage.RetryGet(ctx, r.topo.Replies, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, 0, false, nil
	}
	if err != nil {
		return rec, 0, false, err
	}
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		// Unreadable: treat as "posting" so nothing is posted blindly.
		rec = events.ReplyRecord{State: events.StatePosting}
	}
	return rec, entry.Revision(), true, nil
}

func (r *Replier) createRecord(ctx context.Context, key string, rec events.ReplyRecord) (uint64, error) {
	data, err := rec.Marshal()
	if err != nil {
		return 0, err
	}
	return stage.RetryCreate(ctx, r.topo.Replies, key, data)
}

func (r *Replier) updateRecord(ctx context.Context, key string, rec events.ReplyRecord, rev uint64) (uint64, error) {
	data, err := rec.Marshal()
	if err != nil {
		return 0, err
	}
	var newRev uint64
	err = stage.RetryRequest(ctx, func(ctx context.Context) error {
		var err error
		newRev, err = r.topo.Replies.Update(ctx, key, data, rev)
		if err != nil && isWrongRevision(err) {
			return backoff.Permanent(err)
		}
		return err
	})
	return newRev, err
}
