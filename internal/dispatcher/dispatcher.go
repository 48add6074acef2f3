// Package dispatcher is the stage that runs the handler: it takes inbound
// messages from the dispatcher's durable consumer (shared by any number of
// workers, in any number of processes), runs the handler on each, and
// publishes the reply for the replier.
//
// Per message: decode (malformed → dead letter); look up the handled record
// (present → the handler already finished on an earlier delivery whose ack
// was lost: republish the recorded reply, ack, do not run the handler);
// run the handler with a deadline while telling the server the message is
// in progress; store the handled record (create-only; for a reply posted
// directly it carries the posting mark, which stands for the replier's
// posting record); post the reply through a replier in the same process
// (Config.Direct), or, when there is none or it did not post it, publish
// it with a Nats-Msg-Id derived from the activity id and wait for the
// stream's acknowledgement (a direct post the platform refused for good
// is not published: the refusal is recorded in the handled record, then
// dead-lettered); ack. A crash anywhere after the record is
// stored leads, on redelivery, to the republish path (a posting mark is
// first written to the replies bucket as the posting record it stands
// for); only a crash during the handler runs it again, and the handler
// then sees Delivery > 1.
package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrPanic wraps a handler panic; it is retried like any other error.
var ErrPanic = errors.New("dispatcher: handler panicked")

// errStopGraceOver marks a handler error caused by the end of a graceful
// stop's grace (stage.ErrStopGraceOver), not by the handler.
var errStopGraceOver = stage.ErrStopGraceOver

// Dispatcher runs a handler on inbound messages. It holds no state between
// runs beyond counters: every decision is made from the streams and the
// handled-record bucket, so any number of Dispatchers in any number of
// processes can share the work. It is safe for concurrent use.
type Dispatcher struct {
	js    jetstream.JetStream
	topo  *events.Topology
	h     handler.Handler
	cfg   Config
	log   *slog.Logger
	run   *stage.Runner
	stats counters
	// callHandler is handlerCall, built once in New.
	callHandler handlerFunc
	// running is what the handlers are doing, by workspace (Running).
	running running
	// cancelRuns are the handler runs a tasks/cancel can end (cancel.go).
	cancelRuns cancelable
}

// New validates cfg, applies its defaults (ProgressInterval from the
// dispatcher consumer's AckWait) and returns a Dispatcher. It makes no
// request.
func New(js jetstream.JetStream, topo *events.Topology, h handler.Handler, cfg Config) (*Dispatcher, error) {
	if js == nil || topo == nil || topo.Dispatcher == nil || topo.Handled == nil || h == nil {
		return nil, fmt.Errorf("%w: need a JetStream handle, a topology with the dispatcher consumer and handled bucket, and a handler", ErrInvalidConfig)
	}
	cfg.SetDefaults()
	d := &Dispatcher{js: js, topo: topo, h: h}
	run, err := stage.Open(js, dlq.DispatcherTarget(topo), &cfg.Config, topo.Config.DispatcherAckWait, topo.Config.DispatcherMaxDeliver,
		d.admit, d.steps())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := cfg.Validate(0); err != nil {
		return nil, err
	}
	d.cfg, d.run, d.log = cfg, run, run.Logger()
	d.callHandler = d.handlerCall()
	if topo.Asks == nil {
		d.log.Warn("dispatcher: no " + events.BucketAsks + " bucket; peers' answers to handlers' questions are not routed (create the topology as an admin)")
	}
	return d, nil
}

// Config returns the effective configuration (defaults applied).
func (d *Dispatcher) Config() Config { return d.cfg }

// InFlight is how many messages this Dispatcher is working on now.
func (d *Dispatcher) InFlight() int { return d.run.InFlight() }

// Stats returns the counters since New.
func (d *Dispatcher) Stats() Stats { return d.stats.snapshot(d.run.Stats()) }

// Run handles messages until ctx ends, then stops fetching, lets the
// handlers in flight finish (each bounded by HandlerTimeout) and returns
// nil. Messages that exhaust their deliveries unacknowledged are swept to
// the dead-letter stream while it runs. It returns an error only if the
// NATS connection is closed under it.
func (d *Dispatcher) Run(ctx context.Context) error {
	defer d.watchCancels(ctx)()
	return d.run.Run(ctx)
}

// Drain handles messages until the queue has stayed empty for idle (if
// not set, 1 second) with nothing in flight, or ctx ends, or — when ctx has
// a deadline — the deadline leaves no room for another handler run
// (HandlerTimeout + StartMargin). It waits for the handlers in flight and
// returns the counts of this drain. It first sweeps messages that
// exhausted their deliveries to the dead-letter stream. For CLI one-shots
// and scheduled Lambda drains.
func (d *Dispatcher) Drain(ctx context.Context, idle time.Duration) (Stats, error) {
	before := d.Stats()
	defer d.watchCancels(ctx)()
	_, err := d.run.Drain(ctx, idle)
	return d.Stats().sub(before), err
}

// DrainUntilEmpty is Drain for a queue nothing else adds to meanwhile
// (connect --once): it ends as soon as the queue is empty and nothing is
// in flight; idle bounds only the wait for a message still queued but not
// redelivered yet (stage.Runner.DrainUntilEmpty).
func (d *Dispatcher) DrainUntilEmpty(ctx context.Context, idle time.Duration) (Stats, error) {
	before := d.Stats()
	defer d.watchCancels(ctx)()
	_, err := d.run.DrainUntilEmpty(ctx, idle)
	return d.Stats().sub(before), err
}

// admit implements the start-margin rule for the pull loop: with a ctx
// deadline, a pull may only wait until the last moment a handler can still
// be started.
func (d *Dispatcher) admit(left time.Duration) time.Duration { return left - d.cfg.HandlerTimeout }

// handle runs the handler on a message that no earlier delivery
// finished, then records, publishes and acks its answer (complete).
func (d *Dispatcher) handle(runCtx context.Context, m *message) stage.Outcome {
	answer, herr := d.runHandler(runCtx, m)
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterHandler, m.in) {
		return stage.Abandon()
	}
	if errors.Is(herr, errTaskCancelled) {
		m.cancelled = true
		return d.complete(runCtx, m, handler.Answer{})
	}
	if herr != nil {
		if !errors.Is(herr, errStopGraceOver) {
			d.stats.handlerErrors.Add(1)
		}
		return d.handlerFailed(runCtx, m, herr)
	}
	return d.complete(runCtx, m, answer)
}

// validateInbound checks what the dispatcher relies on beyond
// events.DecodeInbound.
func validateInbound(in *events.Inbound) error {
	if err := events.ValidateWorkspaceID(in.WorkspaceID); err != nil {
		return err
	}
	switch in.Source {
	case events.SourceCanvasUser, events.SourceSelf:
	case events.SourcePeerAgent:
		if in.SourceWorkspaceID == "" {
			return fmt.Errorf("dispatcher: peer message %s lacks source_workspace_id", in.ActivityID)
		}
	default:
		return fmt.Errorf("dispatcher: message %s has unknown source %q", in.ActivityID, in.Source)
	}
	return nil
}

// runHandler prepares the handler's request and context and calls it
// through its own chain (handlerCall): memory and the agent API.
func (d *Dispatcher) runHandler(runCtx context.Context, msg *message) (a handler.Answer, err error) {
	del, in := msg.Delivery, msg.in
	deadline := time.Now().Add(d.cfg.HandlerTimeout)
	if dl, ok := runCtx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	// The handler outlives a cancelled run context (a graceful stop lets
	// it finish), bounded by HandlerTimeout and the stop's grace.
	hctx, cancel := stage.Detach(runCtx, deadline)
	defer cancel()
	defer func() {
		if err != nil && stage.StopGraceOver(hctx) {
			err = fmt.Errorf("%w: %w", errStopGraceOver, err)
		}
	}()
	// A wait for a peer's answer gives the slot back (internal/delegate).
	hctx = stage.WithParking(hctx, del)
	hctx, cancelled, done, err := d.cancellable(hctx, in)
	if err != nil {
		return handler.Answer{}, fmt.Errorf("dispatcher: cancel marks unreadable: %w", err)
	}
	defer done()
	if cancelled {
		return handler.Answer{}, errTaskCancelled
	}
	defer d.running.start(in)()
	defer func() {
		if err != nil && errors.Is(context.Cause(hctx), errTaskCancelled) {
			err = fmt.Errorf("%w: %w", errTaskCancelled, err)
		}
	}()
	m := *in // the handler gets its own copy
	req := &handler.Request{
		Message:  &m,
		Delivery: del.Meta.NumDelivered,
		Deadline: deadline,
		Logger:   msg.Log,
		Progress: del.Progress,
	}
	defer d.watchSlow(msg)()
	start := time.Now()
	defer func() { msg.handlerTook = time.Since(start) }()
	return d.callHandler(hctx, req)
}

// handlerFunc is one call of the handler on a prepared request; ctx ends
// at the request's deadline.
type handlerFunc func(ctx context.Context, req *handler.Request) (handler.Answer, error)

// handlerCall is how the handler is called, in the order a request meets
// it: its conversation's history from memory, its attachments held
// locally, then an agent API session for this message alone, then the
// handler itself.
func (d *Dispatcher) handlerCall() handlerFunc {
	return d.withHistory(d.withFiles(d.withAgentAPI(d.invoke)))
}

// withFiles hands the handler the message's attachments as local files,
// if the dispatcher fetches them.
func (d *Dispatcher) withFiles(next handlerFunc) handlerFunc {
	if d.cfg.Files == nil {
		return next
	}
	return func(ctx context.Context, req *handler.Request) (handler.Answer, error) {
		files, err := d.cfg.Files.Fetch(ctx, req.Message)
		if max := d.run.MaxDeliver(); err != nil && (max == 0 || req.Delivery < uint64(max)) {
			return handler.Answer{}, err // tried again after the retry delay
		}
		req.Files = files
		return next(ctx, req)
	}
}

// withAgentAPI opens the handler's agent API session (internal/agentapi), if
// the dispatcher has one; the session dies when the handler returns.
func (d *Dispatcher) withAgentAPI(next handlerFunc) handlerFunc {
	if d.cfg.Agent == nil {
		return next
	}
	return func(ctx context.Context, req *handler.Request) (handler.Answer, error) {
		var end func()
		req.Agent, end = d.cfg.Agent.Open(ctx, req.Message, req.Deadline)
		defer end()
		return next(ctx, req)
	}
}

// invoke calls the handler, times it and turns a panic into ErrPanic.
func (d *Dispatcher) invoke(ctx context.Context, req *handler.Request) (a handler.Answer, err error) {
	start := time.Now()
	defer func() {
		took := time.Since(start)
		d.stats.handler.Observe(took)
		if d.cfg.ObserveHandler != nil {
			d.cfg.ObserveHandler(took)
		}
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	return handler.AnswerOf(ctx, d.h, req)
}

func (d *Dispatcher) handlerFailed(runCtx context.Context, m *message, herr error) stage.Outcome {
	log := m.Log
	// The handler's answer or stderr may quote the message: whole only at
	// debug level (and in the dead letter, which holds the message anyway).
	log.DebugContext(runCtx, "dispatcher: handler error in full", "error", herr)
	brief := handler.Brief(herr)
	switch {
	case errors.Is(herr, errStopGraceOver):
		// Not the handler's fault: hand it back at once, for another
		// dispatcher or the next start.
		log.InfoContext(runCtx, "dispatcher: handler cut by the end of the stop's grace; the message is handed back")
		d.stats.cutByStop.Add(1)
		return stage.Defer(0)
	case errors.Is(herr, handler.ErrPermanent):
		log.WarnContext(runCtx, "dispatcher: handler failed permanently", "error", brief)
		return stage.DeadLetter(events.ReasonPermanent, herr)
	case d.run.LastDelivery(m.Delivery):
		log.WarnContext(runCtx, "dispatcher: handler failed on the last allowed delivery", "error", brief, "max_deliver", d.run.MaxDeliver())
		return stage.DeadLetter(events.ReasonMaxDeliveries, herr)
	default:
		log.WarnContext(runCtx, "dispatcher: handler failed; will retry", "error", brief)
		return stage.Retry(0)
	}
}

// loopGuard says why a reply to in must be dropped, or "".
func (d *Dispatcher) loopGuard(in *events.Inbound) string {
	return LoopGuard(in, d.cfg.ReplyToReplies, d.cfg.MaxHops)
}

// BuildReply is the reply the dispatcher publishes for in: same workspace
// and activity, routed back to the sender (a peer's reply goes to
// SourceWorkspaceID; a canvas or self message's reply to /notify), with the
// stable A2A message id and one more hop.
func BuildReply(in *events.Inbound, text string, handledAt time.Time) events.Reply {
	r := events.Reply{
		WorkspaceID:      in.WorkspaceID,
		ActivityID:       in.ActivityID,
		Source:           in.Source,
		Text:             text,
		MessageID:        events.ReplyMessageID(in.ActivityID),
		ContextID:        in.ContextID,
		TaskID:           in.TaskID,
		Hops:             in.Hops + 1,
		InboundCreatedAt: in.CreatedAt,
		PolledAt:         in.PolledAt,
		HandledAt:        handledAt,
	}
	if in.Source == events.SourcePeerAgent {
		r.TargetWorkspaceID = in.SourceWorkspaceID
		r.InReplyToMessageID = in.MessageID
	}
	return r
}

// complete stores the handled record of a handler's answer, posts the
// reply directly or publishes it, and acks, in that order: a crash after
// the record makes the redelivery republish the recorded reply
// (duplicate), never run the handler again.
func (d *Dispatcher) complete(runCtx context.Context, m *message, a handler.Answer) stage.Outcome {
	in, log := m.in, m.Log
	now := time.Now().UTC()
	rec := events.HandledRecord{Outcome: events.OutcomeReplied, Delivery: m.Meta.NumDelivered, HandledAt: now}
	if m.cancelled {
		rec.Outcome = events.OutcomeCancelled
		d.stats.cancelled.Add(1)
		log.InfoContext(runCtx, "dispatcher: message cancelled by its sender; not answered", "sender", in.SourceWorkspaceID)
	} else if m.suppressed != "" {
		rec.Outcome = events.OutcomeSuppressed
		log.InfoContext(runCtx, "dispatcher: message not handled by the loop guard", "why", m.suppressed, "sender", in.SourceWorkspaceID)
	} else if a.Empty() {
		rec.Outcome = events.OutcomeNoReply
	} else if why := d.loopGuard(in); why != "" {
		rec.Outcome = events.OutcomeSuppressed
		log.InfoContext(runCtx, "dispatcher: reply dropped by the loop guard", "why", why, "hops", in.Hops, "in_reply_to", in.InReplyTo)
	} else {
		atts, err := d.uploadLocal(runCtx, in, a.Attachments)
		if err != nil {
			return d.handlerFailed(runCtx, m, err)
		}
		reply := d.withMemory(BuildReply(in, a.Text, now), in)
		reply.Attachments = atts
		data, err := reply.Marshal()
		if err != nil {
			return d.handlerFailed(runCtx, m, fmt.Errorf("%w: encode reply: %v", handler.ErrPermanent, err))
		}
		rec.Reply = data
		if d.postsDirectly(m) {
			// The posting mark: this record is the direct post's posting
			// record (one write fewer than a posting record of its own).
			rec.DirectPostingAt, rec.DirectDeadline = now, d.cfg.Direct.DirectPostDeadline(now)
		}
	}
	recData, err := rec.Marshal()
	if err != nil {
		return d.handlerFailed(runCtx, m, fmt.Errorf("%w: encode handled record: %v", handler.ErrPermanent, err))
	}

	ctx, cancel := d.run.OpContext(runCtx)
	defer cancel()
	rev, err := stage.RetryCreate(ctx, d.topo.Handled, m.key, recData)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Another delivery of the same message finished first (it was
		// redelivered while this one ran): its record wins.
		entry, gerr := stage.RetryGet(ctx, d.topo.Handled, m.key)
		if gerr != nil {
			return stage.Retry(0)
		}
		return d.duplicate(runCtx, m, entry.Value())
	}
	if err != nil {
		log.ErrorContext(ctx, "dispatcher: handled record not stored; the handler will run again on redelivery", "error", err)
		return stage.Retry(0)
	}
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterRecord, in) {
		return stage.Abandon()
	}
	if rec.Outcome == events.OutcomeReplied {
		d.streakReplied(ctx, m)
	}
	if rec.Reply != nil {
		if o, finished := d.deliverReply(runCtx, m, rec, rev); finished {
			return o
		}
	} else if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterReplyPublish, in) {
		return stage.Abandon()
	}
	d.rememberUnanswered(runCtx, in, rec.Outcome, log)
	d.stats.handled.Add(1)
	switch rec.Outcome {
	case events.OutcomeReplied:
		d.stats.replied.Add(1)
	case events.OutcomeNoReply:
		d.stats.noReply.Add(1)
	case events.OutcomeCancelled:
		// counted in cancelled
	default:
		d.stats.skipped.Add(1)
	}
	d.logHandled(ctx, m, rec, a)
	return stage.Ack(ackLost)
}

// deliverReply posts the reply of rec (the handled record stored at rev)
// directly, or publishes it. finished says the message ends there, with
// o (a crash point, a retry); else it is to be acked.
func (d *Dispatcher) deliverReply(runCtx context.Context, m *message, rec events.HandledRecord, rev uint64) (o stage.Outcome, finished bool) {
	in, log := m.in, m.Log
	posted, publish := d.postDirect(runCtx, m, rec)
	// The writes after the POST get their own time, not what the POST
	// left of the handled record's.
	ctx, cancel := d.run.OpContext(runCtx)
	defer cancel()
	switch {
	case posted.Abandoned():
		return stage.Abandon(), true
	case posted.Acked():
		return stage.Outcome{}, false
	case d.postsDirectly(m) && crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterDirectPost, in):
		return stage.Abandon(), true
	}
	if reason, cause, refused := posted.DeadLetterReason(); refused && !publish {
		return d.refused(runCtx, ctx, m, rec, rev, events.Refusal{Reason: reason, Error: errorText(cause), At: time.Now().UTC()})
	}
	if !publish {
		log.ErrorContext(ctx, "dispatcher: direct post may have reached the platform and is not recorded; its redelivery records it from the handled record, then publishes")
		return stage.Retry(0), true
	}
	if err := d.publishReply(ctx, in, rec.Reply); err != nil {
		log.ErrorContext(ctx, "dispatcher: reply publish failed; will republish on redelivery", "error", err)
		return stage.Retry(0), true
	}
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterReplyPublish, in) {
		return stage.Abandon(), true
	}
	return stage.Outcome{}, false
}

// refused finishes a reply whose direct post the platform refused for
// good: it records the refusal in the handled record (an update at rev),
// then writes the dead letter the replier stage would have written
// (deadLetterRefused); the message is then acked. Published, the reply
// would be posted again by the stage, and refused again. A redelivery
// after the record writes the dead letter and posts nothing (duplicate);
// before it (the refusal not recorded), it can only post through the
// stream again, the refusal leaving nothing on the platform's feed.
func (d *Dispatcher) refused(runCtx, ctx context.Context, m *message, rec events.HandledRecord, rev uint64, refusal events.Refusal) (stage.Outcome, bool) {
	log := m.Log
	rec.ReplyRefused = &refusal
	data, err := rec.Marshal()
	if err == nil {
		err = stage.RetryRequest(ctx, func(ctx context.Context) error {
			_, err := d.topo.Handled.Update(ctx, m.key, data, rev)
			return err
		})
	}
	if err != nil {
		log.ErrorContext(ctx, "dispatcher: refused direct post not recorded; retrying the message, whose redelivery publishes the reply (or writes its dead letter if the record was written)", "error", err)
		return stage.Retry(0), true
	}
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterRefusalRecord, m.in) {
		return stage.Abandon(), true
	}
	if err := d.deadLetterRefused(ctx, m, rec); err != nil {
		log.ErrorContext(ctx, "dispatcher: dead letter of a refused direct post not written; retrying the message, whose redelivery writes it", "error", err)
		return stage.Retry(0), true
	}
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterRefusalDeadLetter, m.in) {
		return stage.Abandon(), true
	}
	return stage.Outcome{}, false
}

// deadLetterRefused writes the dead letter of the refused direct post
// that rec records (ReplyRefused), through the replier in this process,
// which counts it, or, in a process without one (a redelivery that
// reached a dispatcher run alone), itself.
func (d *Dispatcher) deadLetterRefused(ctx context.Context, m *message, rec events.HandledRecord) error {
	ws, act := m.in.WorkspaceID, m.in.ActivityID
	if d.cfg.Direct != nil {
		return d.cfg.Direct.DeadLetterDirect(ctx, ws, act, rec.Reply, *rec.ReplyRefused)
	}
	return dlq.Publish(ctx, d.js, dlq.OfDirectPost(ws, act, rec.Reply, *rec.ReplyRefused))
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// postsDirectly says whether m's reply is posted by the replier in this
// process (Config.Direct). Only a canvas reply is: a notify takes
// milliseconds, while an /a2a reply to a push-mode peer waits for the
// peer's agent, up to MOLECULE_A2A_TIMEOUT (10 minutes), and would hold
// this handler slot that long; it goes through the reply stream and the
// replier's own slots. Nor is the reply of a dead letter's replay: its
// reply may have been posted before the message was dead-lettered, and a
// marked direct post reads no reply record, while the replier stage's
// finds it sent.
func (d *Dispatcher) postsDirectly(m *message) bool {
	return d.cfg.Direct != nil && m.in.Source != events.SourcePeerAgent && !m.replayed()
}

// postDirect hands the stored reply of rec to the replier in this process
// (Config.Direct), which posts it in this slot with rec's posting mark;
// its outcome says whether the reply is delivered (Ack), is to be
// published (publish), or the message retried. A redelivery never posts
// directly (duplicate publishes): the record the direct post left, or
// the one duplicate writes from the mark, is the replier stage's to
// follow.
func (d *Dispatcher) postDirect(runCtx context.Context, m *message, rec events.HandledRecord) (o stage.Outcome, publish bool) {
	if !d.postsDirectly(m) {
		return stage.Outcome{}, true
	}
	return d.cfg.Direct.PostDirect(runCtx, rec.Reply, rec.Mark(), m.Progress)
}

// duplicate finishes a message whose handled record exists: republish the
// recorded reply (its Nats-Msg-Id makes a second copy within the duplicate
// window harmless, and after it the replier's record stops a second post),
// then ack. The handler does not run.
func (d *Dispatcher) duplicate(runCtx context.Context, m *message, value []byte) stage.Outcome {
	in, log := m.in, m.Log
	var rec events.HandledRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		log.ErrorContext(runCtx, "dispatcher: handled record unreadable; acking without republishing", "error", err)
	}
	ctx, cancel := d.run.OpContext(runCtx)
	defer cancel()
	switch {
	case rec.ReplyRefused != nil:
		// The platform refused the direct post for good: its dead letter
		// (again: the same Nats-Msg-Id), not a second post.
		if err := d.deadLetterRefused(ctx, m, rec); err != nil {
			log.ErrorContext(ctx, "dispatcher: dead letter of a refused direct post not written; retrying", "error", err)
			return stage.Retry(0)
		}
	case len(rec.Reply) > 0:
		if mark := rec.Mark(); !mark.IsZero() {
			if err := d.recordMark(ctx, m, mark); err != nil {
				log.ErrorContext(ctx, "dispatcher: posting record of a direct post not written from the handled record's mark; retrying before republishing", "error", err)
				return stage.Retry(0)
			}
		}
		if err := d.publishReply(ctx, in, rec.Reply); err != nil {
			log.ErrorContext(ctx, "dispatcher: republish of recorded reply failed; retrying", "error", err)
			return stage.Retry(0)
		}
	}
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterReplyPublish, in) {
		return stage.Abandon()
	}
	d.rememberUnanswered(runCtx, in, rec.Outcome, log)
	d.stats.duplicates.Add(1)
	log.InfoContext(ctx, "dispatcher: redelivery of a handled message; handler not run again", "outcome", rec.Outcome)
	return stage.Ack(ackLost)
}

// recordMark creates, from the handled record's posting mark, the posting
// record a direct post of the reply stands on (events.PostingMark.Record):
// the earlier delivery may have died before or after its POST, and the
// stage's delivery of the republished reply must settle it against the
// feed, not post it blind. A record that exists (the reply was recorded
// sent, or the direct post wrote it after an unknown outcome) is left as
// it is. A process without the replier stage opens the bucket here.
func (d *Dispatcher) recordMark(ctx context.Context, m *message, mark events.PostingMark) error {
	kv := d.topo.Replies
	if kv == nil {
		var err error
		if kv, err = d.js.KeyValue(ctx, events.BucketReplies); err != nil {
			return fmt.Errorf("open bucket %s: %w", events.BucketReplies, err)
		}
	}
	data, err := mark.Record().Marshal()
	if err != nil {
		return err
	}
	_, err = stage.RetryCreate(ctx, kv, events.ReplyKey(m.in.WorkspaceID, m.in.ActivityID), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	return err
}

func (d *Dispatcher) publishReply(ctx context.Context, in *events.Inbound, data []byte) error {
	m := &nats.Msg{Subject: events.ReplySubject(in.WorkspaceID), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, events.ReplyMsgID(in.WorkspaceID, in.ActivityID))
	ctx, span := tracing.Start(ctx, "reply-publish", trace.SpanKindProducer)
	defer span.End()
	tracing.Inject(ctx, m.Header)
	err := stage.RetryRequest(ctx, func(ctx context.Context) error {
		_, err := d.js.PublishMsg(ctx, m)
		return err
	})
	if err == nil && d.cfg.OnReply != nil {
		d.cfg.OnReply()
	}
	return err
}

// ackLost is what the redelivery of a message whose ack was lost finds:
// it turns that redelivery into a republish without the handler.
const ackLost = "the handled record"
