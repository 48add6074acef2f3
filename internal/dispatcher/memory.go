package dispatcher

import (
	"context"
	"log/slog"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Conversation memory (internal/memory) in the dispatcher: the handler gets the
// history; a turn is recorded once the reply is sent, by the replier, or
// here when there is no reply to send.

// withHistory sets req's conversation and, with memory on, its history:
// the stored turns, or for a conversation without any, the sender's own
// list (the canvas's params.metadata.history), which is stored as its
// start. A read failure is logged and counted and the handler runs
// without history: an answer without context beats no answer, and the
// handled and reply records that follow need NATS anyway, so a NATS
// outage is retried there.
func (d *Dispatcher) withHistory(next handlerFunc) handlerFunc {
	return func(ctx context.Context, req *handler.Request) (handler.Answer, error) {
		d.recall(ctx, req)
		return next(ctx, req)
	}
}

func (d *Dispatcher) recall(hctx context.Context, req *handler.Request) {
	in, log := req.Message, req.Logger
	req.Conversation = events.ConversationOf(in)
	mem := d.cfg.Memory
	if !mem.On() {
		return
	}
	// Bounded by StoreTimeout, not by the handler's deadline (OpContext
	// drops it), as the records around the handler are.
	ctx, cancel := d.run.OpContext(hctx)
	defer cancel()
	// Tried again in place, each try bounded (stage.AttemptTimeout): a read
	// sent to a history leader that died is never answered, and the
	// handler waited out the whole StoreTimeout for it. The seed is
	// create-only, so a try that was applied makes the next one a no-op.
	var turns []handler.Turn
	err := stage.RetryRequest(ctx, func(ctx context.Context) error {
		var err error
		turns, err = mem.Load(ctx, in.WorkspaceID, req.Conversation)
		if err == nil && len(turns) == 0 {
			turns, err = mem.Seed(ctx, in.WorkspaceID, req.Conversation, memory.SeedTurns(in))
		}
		return err
	})
	if err != nil {
		d.stats.memoryErrors.Add(1)
		log.WarnContext(ctx, "dispatcher: conversation history not read; the handler runs without it", "conversation", req.Conversation, "error", err)
	}
	req.History = turns
}

// withMemory adds to a reply what the replier records once it is sent.
func (d *Dispatcher) withMemory(rep events.Reply, in *events.Inbound) events.Reply {
	if d.cfg.Memory.On() {
		rep.Conversation = events.ConversationOf(in)
		// Clipped as memory would: a long message must not push the
		// reply envelope past NATS's message size.
		rep.InboundText, rep.InboundAttachments = d.cfg.Memory.Clip(in.Text), in.Attachments
	}
	return rep
}

// rememberUnanswered records the user's turn of a message that gets no
// reply (the handler answered nothing, or the loop guard dropped it),
// after its handled record is stored: there is no send to wait for. A
// failure is logged and counted; the message is still acked.
func (d *Dispatcher) rememberUnanswered(runCtx context.Context, in *events.Inbound, outcome string, log *slog.Logger) {
	if outcome == events.OutcomeReplied || !d.cfg.Memory.On() {
		return
	}
	ctx, cancel := d.run.OpContext(runCtx)
	defer cancel()
	conv := events.ConversationOf(in)
	// Record skips turns the conversation holds: a try that was applied
	// makes the next one a no-op.
	if err := stage.RetryRequest(ctx, func(ctx context.Context) error {
		_, err := d.cfg.Memory.Record(ctx, in.WorkspaceID, conv, memory.UserTurn(in))
		return err
	}); err != nil {
		d.stats.memoryErrors.Add(1)
		log.WarnContext(ctx, "dispatcher: turn not recorded in the conversation's memory", "conversation", conv, "error", err)
	}
}
