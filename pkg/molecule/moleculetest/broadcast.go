package moleculetest

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
)

// Broadcasts (Gen2026_08), modelled from enteros-core aeec8e47
// workspace-server/internal/handlers/workspace_broadcast.go (line numbers
// below are that file's) and router.go:310 (behind WorkspaceAuth).

// broadcastHint is the 403's hint, word for word (workspace_broadcast.go:77).
const broadcastHint = "This workspace does not have the broadcast ability. Ask a user or admin to enable it via PATCH /workspaces/:id/abilities."

// SetBroadcastEnabled gives workspace id the broadcast ability or takes it
// away (the platform's PATCH /workspaces/:id/abilities).
func (s *Server) SetBroadcastEnabled(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.broadcastEnabled = on
	}
}

// Broadcast posts message to POST /workspaces/:from/broadcast with from's
// bearer, as an agent does, and returns the HTTP status and body.
func (s *Server) Broadcast(ctx context.Context, from Workspace, message string) (int, []byte, error) {
	body, _ := json.Marshal(map[string]string{"message": message})
	h := http.Header{}
	h.Set("Authorization", "Bearer "+from.Token)
	return s.do(ctx, http.MethodPost, "/workspaces/"+from.ID+"/broadcast", h, body)
}

// handleBroadcast writes a broadcast_receive row (no request_body: the
// message is only in the summary, cut at 120 runes) to every other
// non-removed workspace of the sender's org (156-157), with a
// BROADCAST_MESSAGE event carrying the whole message to each (145-149,
// 161), and a broadcast_sent row on the sender's own feed (166-168). The
// rows are plain INSERTs: no ACTIVITY_LOGGED event announces them.
func (s *Server) handleBroadcast(w http.ResponseWriter, id string, body []byte) {
	var p struct {
		Message string `json:"message"`
	}
	if !bodyInto(body, &p) || p.Message == "" { // binding:"required" (54-58)
		writeError(w, http.StatusBadRequest, "message is required")
		return
	}
	s.mu.RLock()
	sender := s.workspaces[id]
	if sender == nil || sender.removed { // 64-73
		s.mu.RUnlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	if !sender.broadcastEnabled { // 74-80
		s.mu.RUnlock()
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "broadcast_disabled", "hint": broadcastHint})
		return
	}
	root := s.orgRootLocked(sender)
	var recipients []*workspace
	for _, ws := range s.workspaces { // 104-124: same org root, not the sender, not removed
		if ws != sender && !ws.removed && s.orgRootLocked(ws) == root {
			recipients = append(recipients, ws)
		}
	}
	name := sender.name
	s.mu.RUnlock()

	summary := "Broadcast from " + name + ": " + broadcastTruncate(p.Message, 120)
	event := map[string]any{"message": p.Message, "sender_id": id, "sender": name}
	for _, ws := range recipients {
		ws.feed.commit(&row{
			id: newUUID(), workspaceID: ws.id, activityType: "broadcast_receive", method: "broadcast",
			sourceID: id, summary: summary, status: "ok",
		}, s.encodeRow)
		s.publish(ws.id, "BROADCAST_MESSAGE", event)
	}
	sender.feed.commit(&row{
		id: newUUID(), workspaceID: id, activityType: "broadcast_sent", method: "broadcast",
		summary: "Broadcast sent to " + strconv.Itoa(len(recipients)) + " workspace(s)", status: "ok",
	}, s.encodeRow)
	writeJSON(w, http.StatusOK, map[string]any{"status": "sent", "delivered": len(recipients)})
}

// orgRootLocked is the topmost ancestor of ws (the recursive CTE of 86-97).
func (s *Server) orgRootLocked(ws *workspace) *workspace {
	for i := 0; ws.parentID != "" && i < len(s.workspaces); i++ {
		p := s.workspaces[ws.parentID]
		if p == nil {
			break
		}
		ws = p
	}
	return ws
}

// broadcastTruncate cuts s to max runes and marks the cut (179-185).
func broadcastTruncate(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max]) + "…"
}
