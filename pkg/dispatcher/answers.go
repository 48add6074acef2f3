package dispatcher

import (
	"context"
	"log/slog"

	"github.com/molecule-ai/molecule-relay/pkg/delegate"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/stage"
)

// routeAnswer finishes in here when it is a peer's answer to a question a
// handler of this workspace asked (pkg/delegate): stored in the question's
// record for the waiting handler, or dead-lettered when nobody waits for
// it any more. False: in is an ordinary message, for the handler.
func (d *Dispatcher) routeAnswer(runCtx context.Context, m *stage.Delivery, in *events.Inbound, log *slog.Logger) bool {
	if !delegate.MayBeAnswer(d.topo.Asks, in) {
		return false // most messages: no op context needed (6 allocations)
	}
	ctx, cancel := d.run.OpContext(runCtx)
	defer cancel()
	out, err := delegate.Route(ctx, d.topo.Asks, d.topo.Handled, in)
	switch {
	case out == delegate.Unawaited:
		log.Warn("dispatcher: peer answer nobody waits for; dead-lettered", "error", err, "in_reply_to_message_id", in.InReplyToMessageID)
		d.run.DeadLetter(runCtx, m, events.ReasonUnawaitedAnswer, err)
	case err != nil:
		log.Warn("dispatcher: ask record unreadable; retrying later", "error", err)
		d.run.Retry(m, 0)
	case out == delegate.NotAnAnswer:
		return false
	default:
		log.Info("dispatcher: peer answer routed to its question", "duplicate", out == delegate.Duplicate, "in_reply_to_message_id", in.InReplyToMessageID)
		d.ack(runCtx, m, log)
	}
	return true
}
