// Resetting the canvas conversation on the platform's SESSION_RESET.

package poller

import (
	"context"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/memory"
)

// sessionResetEvent is what the platform sends a workspace's stream when
// the canvas's "New session" is pressed (2026-08, chat_session.go:125-131).
const sessionResetEvent = "SESSION_RESET"

// sessionResetTimeout bounds the reset, which runs on the stream's reader:
// the next event (the first message of the new session) waits for it.
const sessionResetTimeout = 5 * time.Second

// resetSession starts the workspace's canvas conversations afresh in
// memory (memory.ResetCanvas), so the next canvas message's handler gets
// no turn from before the reset. A failure is logged: the conversation
// then goes on with its old turns, as before this reset existed.
func (p *Poller) resetSession(ctx context.Context, w *workspace) {
	ctx, cancel := context.WithTimeout(ctx, sessionResetTimeout)
	defer cancel()
	convs, err := memory.ResetCanvas(ctx, p.js, p.topo, w.id)
	if err != nil {
		w.log.WarnContext(ctx, "poller: the canvas started a new session; its conversation memory was not reset and keeps the earlier turns", "error", err, "reset", convs)
		return
	}
	w.log.InfoContext(ctx, "poller: the canvas started a new session; conversation memory starts afresh", "conversations", len(convs))
}
