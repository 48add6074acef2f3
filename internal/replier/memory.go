package replier

import (
	"context"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// remember records a sent reply's two turns (the message answered and the
// reply) in its conversation: "a turn is recorded once the reply is
// sent". It runs before every ack of a sent reply (posted, found on the
// feed by reconcile, or a redelivery that finds it sent, which repairs a
// crash between the sent record and this write; memory skips turns it
// already holds). Memory is best-effort: a failure is logged and counted
// and the reply is acked anyway.
func (r *Replier) remember(runCtx context.Context, j *job) {
	if !r.cfg.Memory.On() || j.rep.Conversation == "" {
		return
	}
	sent := j.rec.SentAt
	if sent.IsZero() {
		sent = time.Now().UTC()
	}
	ctx, cancel := r.run.OpContext(runCtx)
	defer cancel()
	// Tried again in place, each try bounded: a write sent to a history
	// leader that died is never answered and held the message (and its
	// ack) for the whole StoreTimeout. Record skips the turns the
	// conversation holds, so a try that was applied makes the next a no-op.
	if err := stage.RetryRequest(ctx, func(ctx context.Context) error {
		_, err := r.cfg.Memory.Record(ctx, j.rep.WorkspaceID, j.rep.Conversation, memory.TurnsOf(j.rep, sent)...)
		return err
	}); err != nil {
		r.stats.memoryErrors.Add(1)
		j.Log.WarnContext(ctx, "replier: reply sent but not recorded in the conversation's memory", "conversation", j.rep.Conversation, "error", err)
	}
}
