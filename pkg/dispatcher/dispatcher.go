// Package dispatcher is the stage that runs the handler: it takes inbound
// messages from the dispatcher's durable consumer (shared by any number of
// workers, in any number of processes), runs the handler on each, and
// publishes the reply for the replier.
//
// Per message: decode (malformed → dead letter); look up the handled record
// (present → the handler already finished on an earlier delivery whose ack
// was lost: republish the recorded reply, ack, do not run the handler);
// run the handler with a deadline while telling the server the message is
// in progress; store the handled record (create-only); publish the reply
// with a Nats-Msg-Id derived from the activity id and wait for the
// stream's acknowledgement; ack. A crash anywhere after the record is
// stored leads, on redelivery, to the republish path; only a crash during
// the handler runs it again, and the handler then sees Delivery > 1.
package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/molecule-ai/molecule-relay/pkg/tracing"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/dispatcher/workpool"
	"github.com/molecule-ai/molecule-relay/pkg/dlq"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/handler"
)

// ErrPanic wraps a handler panic; it is retried like any other error.
var ErrPanic = errors.New("dispatcher: handler panicked")

// Dispatcher runs a handler on inbound messages. It holds no state between
// runs beyond counters: every decision is made from the streams and the
// handled-record bucket, so any number of Dispatchers in any number of
// processes can share the work. It is safe for concurrent use.
type Dispatcher struct {
	js         jetstream.JetStream
	topo       *events.Topology
	h          handler.Handler
	cfg        Config
	log        *slog.Logger
	maxDeliver int
	stats      counters
}

// New validates cfg, applies its defaults (ProgressInterval from the
// dispatcher consumer's AckWait) and returns a Dispatcher. It makes no
// request.
func New(js jetstream.JetStream, topo *events.Topology, h handler.Handler, cfg Config) (*Dispatcher, error) {
	if js == nil || topo == nil || topo.Dispatcher == nil || topo.Handled == nil || h == nil {
		return nil, fmt.Errorf("%w: need a JetStream handle, a topology with the dispatcher consumer and handled bucket, and a handler", ErrInvalidConfig)
	}
	cfg.SetDefaults()
	ackWait := topo.Config.DispatcherAckWait
	maxDeliver := topo.Config.DispatcherMaxDeliver
	if ci := topo.Dispatcher.CachedInfo(); ci != nil {
		ackWait = ci.Config.AckWait
		maxDeliver = ci.Config.MaxDeliver
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = ackWait / 3
	}
	if err := cfg.Validate(ackWait); err != nil {
		return nil, err
	}
	return &Dispatcher{
		js:         js,
		topo:       topo,
		h:          h,
		cfg:        cfg,
		log:        cfg.Logger.With("stage", events.StageDispatcher),
		maxDeliver: maxDeliver,
	}, nil
}

// Config returns the effective configuration (defaults applied).
func (d *Dispatcher) Config() Config { return d.cfg }

// Stats returns the counters since New.
func (d *Dispatcher) Stats() Stats { return d.stats.snapshot() }

func (d *Dispatcher) poolConfig() workpool.Config {
	return workpool.Config{
		Concurrency: d.cfg.Concurrency,
		FetchBatch:  d.cfg.FetchBatch,
		FetchWait:   d.cfg.FetchWait,
		Logger:      d.log,
	}
}

// Run handles messages until ctx ends, then stops fetching, lets the
// handlers in flight finish (each bounded by HandlerTimeout) and returns
// nil. Messages that exhaust their deliveries unacknowledged are swept to
// the dead-letter stream while it runs. It returns an error only if the
// NATS connection is closed under it.
func (d *Dispatcher) Run(ctx context.Context) error {
	err := d.swept().Serve(ctx, d.poolConfig(), workpool.Options{MaxWait: d.admitWait(ctx)},
		func(msg jetstream.Msg) { d.process(ctx, msg) })
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}

// Drain handles messages until the queue has stayed empty for idle (if
// not set, 1 second) with nothing in flight, or ctx ends, or — when ctx has
// a deadline — the deadline leaves no room for another handler run
// (HandlerTimeout + StartMargin). It waits for the handlers in flight and
// returns the counts of this drain. It first sweeps messages that
// exhausted their deliveries to the dead-letter stream. For CLI one-shots
// and scheduled Lambda drains.
func (d *Dispatcher) Drain(ctx context.Context, idle time.Duration) (Stats, error) {
	if idle <= 0 {
		idle = time.Second
	}
	before := d.stats.snapshot()
	err := d.swept().Drain(ctx, d.poolConfig(), workpool.Options{Idle: idle, MaxWait: d.admitWait(ctx)},
		func(msg jetstream.Msg) { d.process(ctx, msg) })
	stats := d.stats.snapshot().sub(before)
	if err != nil {
		return stats, fmt.Errorf("dispatcher: %w", err)
	}
	return stats, nil
}

func (d *Dispatcher) swept() workpool.Swept {
	return workpool.Swept{JS: d.js, Consumer: d.topo.Dispatcher, Target: dlq.DispatcherTarget(d.topo),
		Interval: d.cfg.SweepInterval, Stage: "dispatcher", Log: d.log}
}

// admitWait implements the start-margin rule for the pool: with a ctx
// deadline, a pull may only wait until the last moment a handler can still
// be started.
func (d *Dispatcher) admitWait(ctx context.Context) func() time.Duration {
	return func() time.Duration {
		dl, ok := ctx.Deadline()
		if !ok {
			return d.cfg.FetchWait
		}
		return time.Until(dl) - d.cfg.HandlerTimeout - d.cfg.StartMargin
	}
}

// opContext bounds the writes after a handler; it outlives a cancelled run
// context so that a stop lets work in flight finish cleanly.
func (d *Dispatcher) opContext(runCtx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(runCtx), d.cfg.StoreTimeout)
}

func (d *Dispatcher) process(runCtx context.Context, msg jetstream.Msg) {
	d.stats.received.Add(1)
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to redeliver or record.
		d.log.Error("dispatcher: message without JetStream metadata", "subject", msg.Subject(), "error", err)
		_ = msg.Term()
		return
	}
	in, err := events.DecodeInbound(msg.Data())
	if err == nil {
		err = validateInbound(in)
	}
	if err != nil {
		d.deadLetter(runCtx, msg, meta, nil, events.ReasonMalformed, err)
		return
	}
	runCtx, span := tracing.Start(tracing.Extract(runCtx, msg.Headers()), "handle", trace.SpanKindConsumer)
	defer span.End()
	log := tracing.Log(runCtx, d.log.With("workspace", in.WorkspaceID, "activity", in.ActivityID, "delivery", meta.NumDelivered))

	// Keep the message ours until it is finished, writes after the
	// handler included.
	progress, stopKeepAlive := workpool.KeepAlive(msg, d.cfg.ProgressInterval)
	defer stopKeepAlive()

	key := events.HandledKey(in.WorkspaceID, in.ActivityID)
	ctx, cancel := d.opContext(runCtx)
	entry, err := d.topo.Handled.Get(ctx, key)
	cancel()
	switch {
	case err == nil:
		d.duplicate(runCtx, msg, meta, in, entry.Value(), log)
		return
	case errors.Is(err, jetstream.ErrKeyNotFound):
	default:
		log.Warn("dispatcher: handled record unreadable; retrying later", "error", err)
		d.retry(msg, meta)
		return
	}

	if dl, ok := runCtx.Deadline(); ok && time.Until(dl) < d.cfg.HandlerTimeout+d.cfg.StartMargin {
		// Not enough time left in this invocation to run a handler:
		// hand the message back at once for another worker.
		d.stats.deferred.Add(1)
		_ = msg.Nak()
		return
	}

	if dup, holder, err := d.claimPeerMessage(runCtx, in); err != nil {
		log.Warn("dispatcher: peer messageId claim failed; retrying later", "error", err)
		d.retry(msg, meta)
		return
	} else if dup {
		d.peerDuplicate(runCtx, msg, in, holder, log)
		return
	}

	text, herr := d.runHandler(runCtx, meta, in, progress, log)
	if h := d.cfg.TestHooks; h != nil && h.AfterHandler != nil && h.AfterHandler(runCtx, in) != nil {
		return
	}
	if herr != nil {
		d.stats.handlerErrors.Add(1)
		d.handlerFailed(runCtx, msg, meta, in, herr, log)
		return
	}
	d.complete(runCtx, msg, meta, in, key, text, log)
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

func (d *Dispatcher) runHandler(runCtx context.Context, meta *jetstream.MsgMetadata, in *events.Inbound, progress func(), log *slog.Logger) (text string, err error) {
	deadline := time.Now().Add(d.cfg.HandlerTimeout)
	if dl, ok := runCtx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	// The handler outlives a cancelled run context (a clean stop lets it
	// finish), bounded by HandlerTimeout.
	hctx, cancel := context.WithDeadline(context.WithoutCancel(runCtx), deadline)
	defer cancel()
	m := *in // the handler gets its own copy
	req := &handler.Request{
		Message:  &m,
		Delivery: meta.NumDelivered,
		Deadline: deadline,
		Logger:   log,
		Progress: progress,
	}
	start := time.Now()
	defer func() {
		took := time.Since(start)
		d.stats.observe(took)
		if d.cfg.ObserveHandler != nil {
			d.cfg.ObserveHandler(took)
		}
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	return d.h.Handle(hctx, req)
}

func (d *Dispatcher) handlerFailed(runCtx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, in *events.Inbound, herr error, log *slog.Logger) {
	// The handler's answer or stderr may quote the message: whole only at
	// debug level (and in the dead letter, which holds the message anyway).
	log.Debug("dispatcher: handler error in full", "error", herr)
	brief := handler.Brief(herr)
	switch {
	case errors.Is(herr, handler.ErrPermanent):
		log.Warn("dispatcher: handler failed permanently", "error", brief)
		d.deadLetter(runCtx, msg, meta, in, events.ReasonPermanent, herr)
	case d.maxDeliver > 0 && meta.NumDelivered >= uint64(d.maxDeliver):
		log.Warn("dispatcher: handler failed on the last allowed delivery", "error", brief, "max_deliver", d.maxDeliver)
		d.deadLetter(runCtx, msg, meta, in, events.ReasonMaxDeliveries, herr)
	default:
		log.Warn("dispatcher: handler failed; will retry", "error", brief)
		d.retry(msg, meta)
	}
}

// retry naks msg with the backoff of its delivery count. Plain Nak ignores
// the consumer's BackOff (nats-server#4726), so the delay is explicit.
func (d *Dispatcher) retry(msg jetstream.Msg, meta *jetstream.MsgMetadata) {
	d.stats.retried.Add(1)
	_ = msg.NakWithDelay(workpool.RetryDelay(d.cfg.RetryBase, d.cfg.RetryMax, meta.NumDelivered))
}

// deadLetter publishes a dead letter for msg and then terminates it. If
// the dead letter cannot be written the message is retried instead, so
// nothing is dropped.
func (d *Dispatcher) deadLetter(runCtx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, in *events.Inbound, reason string, cause error) {
	dl := events.DeadLetter{
		Stage:           events.StageDispatcher,
		WorkspaceID:     dlq.WorkspaceOfSubject(msg.Subject()),
		Reason:          reason,
		Error:           cause.Error(),
		Deliveries:      meta.NumDelivered,
		OriginalSubject: msg.Subject(),
		OriginalStream:  meta.Stream,
		OriginalSeq:     meta.Sequence.Stream,
		Envelope:        dlq.EnvelopeOf(msg.Data()),
	}
	if in != nil {
		dl.WorkspaceID, dl.ActivityID = in.WorkspaceID, in.ActivityID
	}
	ctx, cancel := d.opContext(runCtx)
	defer cancel()
	if err := dlq.Publish(ctx, d.js, dl); err != nil {
		d.log.Error("dispatcher: dead letter not written; retrying the message", "subject", msg.Subject(), "reason", reason, "error", err)
		d.retry(msg, meta)
		return
	}
	d.stats.deadLettered.Add(1)
	d.log.Warn("dispatcher: message dead-lettered", "workspace", dl.WorkspaceID, "activity", dl.ActivityID, "reason", reason, "deliveries", meta.NumDelivered,
		"action", "inspect it with `molecule-relay dlq show SEQ`, fix the cause, then `dlq replay SEQ`")
	if err := msg.TermWithReason(reason); err == nil {
		d.stats.terminated.Add(1)
	}
}

// loopGuard says why a reply to in must be dropped, or "".
func (d *Dispatcher) loopGuard(in *events.Inbound) string {
	switch {
	case in.InReplyTo != "" && !d.cfg.ReplyToReplies:
		return "message is itself a reply"
	case in.Role == "agent" && in.Source == events.SourcePeerAgent && !d.cfg.ReplyToReplies:
		return "message is a peer agent's answer (role agent)"
	case in.Hops >= d.cfg.MaxHops:
		return "hop limit reached"
	}
	return ""
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
		Hops:             in.Hops + 1,
		InboundCreatedAt: in.CreatedAt,
		PolledAt:         in.PolledAt,
		HandledAt:        handledAt,
	}
	if in.Source == events.SourcePeerAgent {
		r.TargetWorkspaceID = in.SourceWorkspaceID
	}
	return r
}

func (d *Dispatcher) complete(runCtx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, in *events.Inbound, key, text string, log *slog.Logger) {
	now := time.Now().UTC()
	rec := dlq.HandledRecord{Outcome: dlq.OutcomeReplied, Delivery: meta.NumDelivered, HandledAt: now}
	if text == "" {
		rec.Outcome = dlq.OutcomeNoReply
	} else if why := d.loopGuard(in); why != "" {
		rec.Outcome = dlq.OutcomeSuppressed
		log.Info("dispatcher: reply dropped by the loop guard", "why", why, "hops", in.Hops, "in_reply_to", in.InReplyTo)
	} else {
		data, err := BuildReply(in, text, now).Marshal()
		if err != nil {
			d.handlerFailed(runCtx, msg, meta, in, fmt.Errorf("%w: encode reply: %v", handler.ErrPermanent, err), log)
			return
		}
		rec.Reply = data
	}
	recData, err := json.Marshal(rec)
	if err != nil {
		d.handlerFailed(runCtx, msg, meta, in, fmt.Errorf("%w: encode handled record: %v", handler.ErrPermanent, err), log)
		return
	}

	ctx, cancel := d.opContext(runCtx)
	defer cancel()
	err = workpool.RetryWrite(ctx, func() error {
		_, err := d.topo.Handled.Create(ctx, key, recData)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return backoff.Permanent(err)
		}
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Another delivery of the same message finished first (it was
		// redelivered while this one ran): its record wins.
		entry, gerr := d.topo.Handled.Get(ctx, key)
		if gerr != nil {
			d.retry(msg, meta)
			return
		}
		d.duplicate(runCtx, msg, meta, in, entry.Value(), log)
		return
	}
	if err != nil {
		log.Error("dispatcher: handled record not stored; the handler will run again on redelivery", "error", err)
		d.retry(msg, meta)
		return
	}
	if h := d.cfg.TestHooks; h != nil && h.AfterRecord != nil && h.AfterRecord(runCtx, in) != nil {
		return
	}
	if rec.Reply != nil {
		if err := d.publishReply(ctx, in, rec.Reply); err != nil {
			log.Error("dispatcher: reply publish failed; will republish on redelivery", "error", err)
			d.retry(msg, meta)
			return
		}
	}
	if h := d.cfg.TestHooks; h != nil && h.AfterReplyPublish != nil && h.AfterReplyPublish(runCtx, in) != nil {
		return
	}
	d.stats.handled.Add(1)
	switch rec.Outcome {
	case dlq.OutcomeReplied:
		d.stats.replied.Add(1)
	case dlq.OutcomeNoReply:
		d.stats.noReply.Add(1)
	default:
		d.stats.skipped.Add(1)
	}
	d.ack(ctx, msg, log)
	log.Debug("dispatcher: handled", "outcome", rec.Outcome)
}

// duplicate finishes a message whose handled record exists: republish the
// recorded reply (its Nats-Msg-Id makes a second copy within the duplicate
// window harmless, and after it the replier's record stops a second post),
// then ack. The handler does not run.
func (d *Dispatcher) duplicate(runCtx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, in *events.Inbound, value []byte, log *slog.Logger) {
	var rec dlq.HandledRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		log.Error("dispatcher: handled record unreadable; acking without republishing", "error", err)
	}
	ctx, cancel := d.opContext(runCtx)
	defer cancel()
	if len(rec.Reply) > 0 {
		if err := d.publishReply(ctx, in, rec.Reply); err != nil {
			log.Error("dispatcher: republish of recorded reply failed; retrying", "error", err)
			d.retry(msg, meta)
			return
		}
	}
	if h := d.cfg.TestHooks; h != nil && h.AfterReplyPublish != nil && h.AfterReplyPublish(runCtx, in) != nil {
		return
	}
	d.stats.duplicates.Add(1)
	log.Info("dispatcher: redelivery of a handled message; handler not run again", "outcome", rec.Outcome)
	d.ack(ctx, msg, log)
}

func (d *Dispatcher) publishReply(ctx context.Context, in *events.Inbound, data []byte) error {
	m := &nats.Msg{Subject: events.ReplySubject(in.WorkspaceID), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, events.ReplyMsgID(in.WorkspaceID, in.ActivityID))
	ctx, span := tracing.Start(ctx, "reply-publish", trace.SpanKindProducer)
	defer span.End()
	tracing.Inject(ctx, m.Header)
	err := workpool.RetryWrite(ctx, func() error {
		_, err := d.js.PublishMsg(ctx, m)
		return err
	})
	if err == nil && d.cfg.OnReply != nil {
		d.cfg.OnReply()
	}
	return err
}

// ack acknowledges and waits for the server's confirmation, so a finished
// message stops counting against the consumer's ack-pending limit before
// its slot is reused. A lost ack is harmless: the redelivery finds the
// handled record.
func (d *Dispatcher) ack(ctx context.Context, msg jetstream.Msg, log *slog.Logger) {
	if err := msg.DoubleAck(ctx); err != nil {
		log.Warn("dispatcher: ack not confirmed; a redelivery will find the handled record", "error", err)
	}
}
