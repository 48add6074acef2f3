package delegate

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// send posts the question (role "user": a relay drops a peer's
// role-"agent" message as an answer) and marks the record sent. A push
// peer's synchronous answer is stored and returned; nil, nil means "wait".
// A failed send leaves the record unsent: a re-run sends it again under
// the same messageId.
func (a *Asker) send(ctx context.Context, c *molecule.Client, key, id string, s Scope, q handler.Question, deadline time.Time, log *slog.Logger) (*handler.PeerAnswer, error) {
	sctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := a.waitBudget(sctx, c); err != nil {
		return nil, fmt.Errorf("%w: rate budget: %w", ErrNoAnswer, err)
	}
	res, err := c.SendA2A(sctx, molecule.A2AMessage{
		To: q.PeerID, Text: q.Text, Attachments: events.MoleculeAttachments(q.Attachments), MessageID: id, ContextID: contextOf(s, id),
		Role: "user", Timeout: time.Until(deadline), Metadata: map[string]any{"relay_hops": s.Hops + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("delegate: asking %s: %w", q.PeerID, err)
	}
	pa, perr := molecule.ParseA2AAnswer(res.Body)
	if perr != nil {
		log.WarnContext(ctx, "delegate: peer's answer unreadable; waiting for one through the feed", "error", perr)
	}
	rec, err := update(ctx, a.cfg.Asks, key, func(r *events.AskRecord) bool {
		if r.State == events.AskAnswered {
			return false // routed meanwhile
		}
		r.SentAt = time.Now().UTC()
		if pa != nil {
			r.State = events.AskAnswered
			r.Answer = &events.AskAnswer{Text: pa.Text, Attachments: attachments(pa.Attachments), At: r.SentAt}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("delegate: question sent, record not updated: %w", err)
	}
	if rec.State == events.AskAnswered {
		log.DebugContext(ctx, "delegate: answered in the send's response", "status", res.StatusCode)
		return peerAnswer(id, rec.Answer), nil
	}
	log.DebugContext(ctx, "delegate: question queued; waiting", "status", res.StatusCode, "delivery_mode", res.DeliveryMode)
	return nil, nil
}

func attachments(in []molecule.Attachment) []events.Attachment {
	out := make([]events.Attachment, len(in))
	for i, f := range in {
		out[i] = events.Attachment(f)
	}
	return out
}

// waitBudget takes one request of the platform's rate budget, keeping
// RateReserve for the heartbeat (docs/protocol.md §2).
func (a *Asker) waitBudget(ctx context.Context, c *molecule.Client) error {
	for {
		d := c.TakeBudget(a.cfg.RateReserve)
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
