package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// message is one delivery of an inbound message, once decoded.
type message struct {
	*stage.Delivery
	in  *events.Inbound
	key string // its handled record's (events.HandledKey)
	// suppressed says why the message is not handled (the peer streak of
	// the loop guard), or "".
	suppressed string
	// cancelled: its sender cancelled its task (tasks/cancel).
	cancelled bool
	// received is when this delivery reached the dispatcher; handlerTook
	// how long its handler ran (the milestone lines, msglog.go).
	received    time.Time
	handlerTook time.Duration
}

// steps is the dispatcher's work on one delivery, in the order a message
// meets it. Each step either returns how the message is finished (the
// stage.Runner applies it) or passes it on; the order is what makes the
// handler run once: an answer or a handled message never reaches the
// handler, and a message admitted to it is claimed first.
func (d *Dispatcher) steps() stage.Step[*stage.Delivery] {
	return d.decoded(stage.Steps(d.handle,
		d.traced,        // the publisher's trace, and the message's logger
		d.cancels,       // a sender's tasks/cancel: mark the task cancelled, ack
		d.answers,       // a peer's answer to a handler's question (internal/delegate)
		d.handledBefore, // finished by an earlier delivery: republish, ack
		d.admitted,      // the start-margin rule: no room for a handler, defer
		d.peerClaimed,   // a peer's messageId another activity row carried: ack
		d.peerStreak,    // the loop guard for peers without hop count: not handled
	))
	// then handle: memory and the agent API around the handler (runHandler),
	// the handled record, the reply publish, the ack (complete).
}

// decoded decodes and checks the inbound envelope (malformed: dead
// letter) and names the message in its dead letter.
func (d *Dispatcher) decoded(next stage.Step[*message]) stage.Step[*stage.Delivery] {
	return func(runCtx context.Context, del *stage.Delivery) stage.Outcome {
		in, err := events.DecodeInbound(del.Msg.Data())
		if err == nil {
			err = validateInbound(in)
		}
		if err != nil {
			return stage.DeadLetter(events.ReasonMalformed, err)
		}
		del.WorkspaceID, del.ActivityID = in.WorkspaceID, in.ActivityID
		return next(runCtx, &message{Delivery: del, in: in, key: events.HandledKey(in.WorkspaceID, in.ActivityID)})
	}
}

// traced continues the publisher's trace in a "handle" span and gives the
// message its logger; the message is finished in that trace.
func (d *Dispatcher) traced(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		runCtx, span := tracing.Start(tracing.Extract(runCtx, m.Msg.Headers()), "handle", trace.SpanKindConsumer,
			attribute.String("molecule.activity_id", m.in.ActivityID), attribute.Int64("molecule.delivery", int64(m.Meta.NumDelivered)))
		defer span.End()
		m.FinishIn(runCtx)
		m.Log = tracing.Log(runCtx, stage.MessageLogger(d.log,
			slog.String("workspace", m.in.WorkspaceID), slog.String("activity", m.in.ActivityID), slog.Uint64("delivery", m.Meta.NumDelivered)))
		d.logReceived(runCtx, m)
		return next(runCtx, m)
	}
}

// handledBefore finishes a message whose handled record exists (its
// handler finished on an earlier delivery whose ack was lost) without
// running the handler again (duplicate).
func (d *Dispatcher) handledBefore(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		ctx, cancel := d.run.OpContext(runCtx)
		// Retried in place: a read meeting a bucket without a leader would
		// otherwise wait out StoreTimeout, then spend a delivery.
		entry, err := stage.RetryGet(ctx, d.topo.Handled, m.key)
		cancel()
		switch {
		case err == nil:
			return d.duplicate(runCtx, m, entry.Value())
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return next(runCtx, m)
		default:
			m.Log.WarnContext(ctx, "dispatcher: handled record unreadable; retrying later", "error", err)
			return stage.Retry(0)
		}
	}
}

// admitted hands the message back at once, for another worker, when this
// run has not enough time left to run a handler.
func (d *Dispatcher) admitted(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		if !d.run.Fits(runCtx, d.cfg.HandlerTimeout) {
			return stage.Defer(0)
		}
		return next(runCtx, m)
	}
}
