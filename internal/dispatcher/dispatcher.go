// Package dispatcher is the stage that runs the handler: it takes inbound
// messages from the dispatcher's durable consumer (shared by any number of
// workers, in any number of processes), runs the handler on each, and
// leaves the reply to its stage runner, which delivers it.
//
// Per message: decode (malformed → dead letter); look up the handled record
// (present → the handler already finished on an earlier delivery whose ack
// was lost: leave the recorded reply to the runner, do not run the
// handler); run the handler with a deadline while telling the server the
// message is in progress; store the handled record (create-only; for a
// reply the runner posts directly it carries the posting mark, which
// stands for the replier's posting record: stage.Runner.MarkDirect). The
// dispatcher's work ends there: the stage runner delivers the reply
// (stage.Deliver: posted directly through a replier in the same process,
// stage.Config.Direct, or published with a Nats-Msg-Id derived from the
// activity id) and acks. A crash anywhere after the record is stored
// leads, on redelivery, to the republish path; only a crash during the
// handler runs it again, and the handler then sees Delivery > 1.
package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
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
	// streaks are the loop guard's peer streaks (loopguard.go).
	streaks streaks
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
		d.run.MarkDirect(&rec, m.Delivery, in, now)
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
	return d.deliver(m, rec, rev, func(ctx context.Context) {
		d.rememberUnanswered(ctx, in, rec.Outcome, log)
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
	})
}

// deliver leaves m's handled record rec (stored at rev; 0: found stored)
// and its reply to the stage runner, which delivers the reply (posts it
// directly, publishes it or dead-letters its refusal: stage.Deliver),
// calls delivered, then acks.
func (d *Dispatcher) deliver(m *message, rec events.HandledRecord, rev uint64, delivered func(context.Context)) stage.Outcome {
	return stage.Deliver(stage.Reply{In: m.in, Record: rec, Rev: rev, Handled: d.topo.Handled, Key: m.key, Replies: d.topo.Replies,
		Lost: ackLost, Delivered: delivered})
}

// duplicate finishes a message whose handled record exists: the stage
// runner republishes the recorded reply (or dead-letters its refusal),
// then acks. The handler does not run.
func (d *Dispatcher) duplicate(runCtx context.Context, m *message, value []byte) stage.Outcome {
	var rec events.HandledRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		m.Log.ErrorContext(runCtx, "dispatcher: handled record unreadable; acking without republishing", "error", err)
	}
	return d.deliver(m, rec, 0, func(ctx context.Context) {
		d.rememberUnanswered(ctx, m.in, rec.Outcome, m.Log)
		d.stats.duplicates.Add(1)
		m.Log.InfoContext(ctx, "dispatcher: redelivery of a handled message; handler not run again", "outcome", rec.Outcome)
	})
}

// ackLost is what the redelivery of a message whose ack was lost finds:
// it turns that redelivery into a republish without the handler.
const ackLost = "the handled record"
