package dispatcher

import (
	"context"
	"errors"

	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// answers finishes a peer's answer to a question a handler of this
// workspace asked (internal/delegate): stored in the question's record for the
// waiting handler, or dead-lettered when it names a question nobody waits
// for any more. A possible answer without our ids whose question is still
// being sent is retried shortly. An ordinary message goes on, to the
// handler.
func (d *Dispatcher) answers(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		in, log := m.in, m.Log
		if !delegate.MayBeAnswer(d.topo.Asks, in) {
			return next(runCtx, m) // most messages: no op context needed (6 allocations)
		}
		ctx, cancel := d.run.OpContext(runCtx)
		out, err := delegate.Route(ctx, d.topo.Asks, d.topo.Handled, in)
		cancel()
		switch {
		case out == delegate.Unawaited:
			log.WarnContext(ctx, "dispatcher: peer answer nobody waits for; dead-lettered", "error", err, "in_reply_to_message_id", in.InReplyToMessageID)
			return stage.DeadLetter(events.ReasonUnawaitedAnswer, err)
		case errors.Is(err, delegate.ErrInFlight) && d.run.LastDelivery(m.Delivery):
			log.WarnContext(ctx, "dispatcher: a question to this peer is still being sent at the last delivery; handled as a message")
			return next(runCtx, m)
		case errors.Is(err, delegate.ErrInFlight):
			log.DebugContext(ctx, "dispatcher: a question to this peer is being sent; retrying its possible answer shortly")
			return stage.Retry(0)
		case err != nil:
			log.WarnContext(ctx, "dispatcher: ask record unreadable; retrying later", "error", err)
			return stage.Retry(0)
		case out == delegate.NotAnAnswer:
			return next(runCtx, m)
		default:
			log.InfoContext(ctx, "dispatcher: peer answer routed to its question", "duplicate", out == delegate.Duplicate,
				"in_reply_to_message_id", in.InReplyToMessageID, "matched_by_order", in.InReplyToMessageID == "")
			return stage.Ack(ackLost)
		}
	}
}
