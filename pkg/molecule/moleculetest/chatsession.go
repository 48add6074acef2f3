package moleculetest

import (
	"context"
	"net/http"
	"time"
)

// The canvas "New session" (Gen2026_08), modelled from enteros-core
// aeec8e47 workspace-server/internal/handlers/chat_session.go (line
// numbers below are that file's) and router.go:563 (behind WorkspaceAuth).
// The marker is read by GET /chat-history only (chat_history.go:103-111):
// neither GET /workspaces/:id nor /state carries it.

// NewChatSession presses the canvas's "New session" on workspace id
// (POST /workspaces/:id/chat-session/new with the admin bearer) and
// returns the HTTP status and body.
func (s *Server) NewChatSession(ctx context.Context, id string) (int, []byte, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+s.admin)
	return s.do(ctx, http.MethodPost, "/workspaces/"+id+"/chat-session/new", h, nil)
}

// ChatSessionStartedAt is workspace id's chat_session_started_at (zero
// until the first "New session").
func (s *Server) ChatSessionStartedAt(id string) time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if w := s.workspaces[id]; w != nil {
		return w.chatSessionStartedAt
	}
	return time.Time{}
}

// handleNewChatSession moves the marker to now (109-118) and broadcasts
// SESSION_RESET to the workspace's own subscribers, the sender's device
// included (125-131); no row is written or deleted. 404 for an unknown
// workspace (99-103; a removed one keeps its row and is reset too).
func (s *Server) handleNewChatSession(w http.ResponseWriter, id string) {
	s.mu.Lock()
	ws := s.workspaces[id]
	if ws == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	prev := !ws.chatSessionStartedAt.IsZero()
	marker := time.Now().UTC()
	ws.chatSessionStartedAt = marker
	s.mu.Unlock()
	s.publish(id, "SESSION_RESET", map[string]any{
		"workspace_id":            id,
		"chat_session_started_at": marker.Format(time.RFC3339Nano),
		"prev_marker_set":         prev,
	})
	// ChatSessionNewResponse (47-51): broadcast_seq is never set (omitempty).
	writeJSON(w, http.StatusOK, map[string]any{"workspace_id": id, "chat_session_started_at": marker})
}
