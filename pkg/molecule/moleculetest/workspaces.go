package moleculetest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

func secondsDur(n int) time.Duration { return time.Duration(n) * time.Second }

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, body []byte) {
	tok := bearer(r)
	if tok == "" {
		writeError(w, http.StatusUnauthorized, "admin auth required")
		return
	}
	if tok != s.admin {
		writeError(w, http.StatusUnauthorized, "invalid admin auth token")
		return
	}
	var p struct {
		Name     string `json:"name"`
		Runtime  string `json:"runtime"`
		External bool   `json:"external"`
		URL      string `json:"url"`
		ParentID string `json:"parent_id"`
	}
	if !bodyInto(body, &p) || p.Name == "" {
		writeError(w, http.StatusBadRequest, "invalid request body")
		return
	}
	if p.URL != "" {
		s.mu.Lock()
		ws := s.newWorkspaceLocked(newUUID(), p.Name, p.ParentID)
		ws.status, ws.url = "online", p.URL
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]any{"external": true, "id": ws.id, "status": "online"})
		return
	}
	ws := s.create(p.Name, p.ParentID)
	base := "http://" + r.Host
	writeJSON(w, http.StatusCreated, map[string]any{
		"id":       ws.ID,
		"external": true,
		"status":   "awaiting_agent",
		"connection": map[string]any{
			"workspace_id":       ws.ID,
			"platform_url":       base,
			"auth_token":         ws.Token,
			"registry_endpoint":  base + "/registry/register",
			"heartbeat_endpoint": base + "/registry/heartbeat",
		},
	})
}

func (s *Server) handleGetWorkspace(w http.ResponseWriter, r *http.Request, id string) {
	if !isUUID(id) {
		writeError(w, http.StatusBadRequest, "invalid workspace ID")
		return
	}
	s.mu.RLock()
	ws := s.workspaces[id]
	if ws == nil {
		s.mu.RUnlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	if ws.removed && s.gen >= Gen2026_05 && r.URL.Query().Get("include_removed") != "true" {
		hint := "Regenerate workspace + token from the canvas → Tokens tab"
		if s.gen >= Gen2026_08 { // enteros-core aeec8e47 handlers/workspace.go:1824
			hint = "Create a replacement workspace in Canvas, then open Settings → Workspace Tokens → + New Token"
		}
		b := map[string]any{
			"error":      "workspace removed",
			"hint":       hint,
			"id":         ws.id,
			"removed_at": formatTime(ws.removedAt),
		}
		s.mu.RUnlock()
		writeJSON(w, http.StatusGone, b)
		return
	}
	var parent, card any
	if ws.parentID != "" {
		parent = ws.parentID
	}
	if len(ws.agentCard) > 0 {
		card = ws.agentCard
	}
	status := ws.status
	if ws.removed {
		status = "removed"
	}
	out := map[string]any{
		"active_tasks": ws.activeTasks, "agent_card": card, "collapsed": false, "id": ws.id,
		"last_error_rate": ws.errorRate, "last_outbound_at": nil, "max_concurrent_tasks": 1,
		"name": ws.name, "parent_id": parent, "role": nullIfEmpty(ws.role), "runtime": ws.runtime, "status": status,
		"tier": ws.tier, "uptime_seconds": ws.uptime, "url": ws.url, "x": 0, "y": 0,
	}
	s.mu.RUnlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, id string) {
	tok := bearer(r)
	if tok == "" {
		writeError(w, http.StatusUnauthorized, "admin auth required")
		return
	}
	if tok != s.admin {
		writeError(w, http.StatusUnauthorized, "invalid admin auth token")
		return
	}
	if s.gen >= Gen2026_08 && !s.confirmDelete(w, r, id) {
		return
	}
	if !s.remove(id) {
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	// The observed answer: no Docker daemon, the row is removed anyway.
	writeJSON(w, http.StatusInternalServerError, map[string]any{
		"error":         "workspace marked removed, but 1 stop call(s) failed — please retry: Cannot connect to the Docker daemon",
		"removed_count": 1,
		"stop_failures": 1,
	})
}

// talkToUserHint is the hint of the 403 talk_to_user_disabled
// (enteros-core aeec8e47 handlers/activity.go:875).
const talkToUserHint = "This workspace is not allowed to send messages directly to the user. Forward your update to a parent workspace using delegate_task — they may be able to reach the user."

// confirmDelete is the 2026-08 guard of DELETE /workspaces/:id
// (enteros-core aeec8e47 handlers/workspace_crud.go:664-687): 404 for an
// unknown id, 410 for a removed one, and 400
// destructive_action_requires_confirmation unless X-Confirm-Name is the
// workspace's name. It reports whether the delete may go on.
func (s *Server) confirmDelete(w http.ResponseWriter, r *http.Request, id string) bool {
	s.mu.RLock()
	ws := s.workspaces[id]
	var name string
	var removed bool
	var tasks, children int
	if ws != nil {
		name, removed, tasks = ws.name, ws.removed, ws.activeTasks
		for _, c := range s.order {
			if c.parentID == id && !c.removed {
				children++
			}
		}
	}
	s.mu.RUnlock()
	switch {
	case ws == nil:
		writeError(w, http.StatusNotFound, "workspace not found")
		return false
	case removed:
		writeJSON(w, http.StatusGone, map[string]string{"error": "workspace removed", "id": id})
		return false
	case r.Header.Get("X-Confirm-Name") != name:
		writeJSON(w, http.StatusBadRequest, map[string]any{
			"error":          "destructive_action_requires_confirmation",
			"hint":           "Re-send the same request with header X-Confirm-Name: " + name,
			"workspace_name": name, "active_tasks": tasks, "child_count": children,
		})
		return false
	}
	return true
}

// ownTokenLocked is the handler-level re-check of /state, /secrets/values
// and plugin download: the workspace's own token whenever it has a live
// one, so the admin token gets 401 there.
func (s *Server) ownTokenLocked(w http.ResponseWriter, ws *workspace, admin bool) bool {
	if admin && ws != nil && ws.liveTokens > 0 {
		writeError(w, http.StatusUnauthorized, "invalid workspace auth token")
		return false
	}
	return true
}

func (s *Server) handleState(w http.ResponseWriter, _ *http.Request, id string, admin bool) {
	s.mu.RLock()
	ws := s.workspaces[id]
	if !s.ownTokenLocked(w, ws, admin) {
		s.mu.RUnlock()
		return
	}
	switch {
	case ws == nil:
		s.mu.RUnlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"deleted": true, "workspace_id": id})
	case ws.removed:
		s.mu.RUnlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"deleted": true, "status": "removed", "workspace_id": id})
	default:
		st := ws.status
		s.mu.RUnlock()
		writeJSON(w, http.StatusOK, map[string]any{"deleted": false, "paused": st == "paused", "status": st, "workspace_id": id})
	}
}

func (s *Server) handleSecrets(w http.ResponseWriter, _ *http.Request, id string, admin bool) {
	if !isUUID(id) {
		writeError(w, http.StatusBadRequest, "invalid workspace ID")
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ws := s.workspaces[id]
	if !s.ownTokenLocked(w, ws, admin) {
		return
	}
	out := make(map[string]string, len(s.globals))
	for k, v := range s.globals {
		out[k] = v
	}
	if ws != nil {
		for k, v := range ws.secrets {
			out[k] = v
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) encodeRow(r *row) []byte {
	if s.gen == Gen2026_04 {
		return encodeRowOld(r)
	}
	if s.gen >= Gen2026_08 {
		r.attachments = requestAttachments(r.requestBody) // include=peer_info's, once per write
	}
	return encodeRowNew(r, s.gen >= Gen2026_08, nil)
}

func (s *Server) bodyOrder() keyOrder {
	if s.gen == Gen2026_04 {
		return orderSorted
	}
	return orderJSONB
}

func (s *Server) handleNotify(w http.ResponseWriter, _ *http.Request, id string, body []byte) {
	m, err := decodeObject(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid request body")
		return
	}
	msg, _ := m["message"].(string)
	if msg == "" {
		writeError(w, http.StatusBadRequest, "message is required")
		return
	}
	var parts []any
	var atts []any
	if a, ok := m["attachments"]; ok && a != nil {
		list, ok := a.([]any)
		if !ok {
			writeError(w, http.StatusBadRequest, "invalid request body")
			return
		}
		for i, e := range list {
			att, _ := e.(map[string]any)
			uri, _ := att["uri"].(string)
			name, _ := att["name"].(string)
			if uri == "" || name == "" {
				writeError(w, http.StatusBadRequest, "attachment["+strconv.Itoa(i)+"]: uri and name are required")
				return
			}
			file := map[string]any{"uri": uri, "name": name}
			if v, ok := att["mimeType"]; ok && v != nil {
				file["mimeType"] = v
			}
			if v, ok := att["size"]; ok && v != nil {
				file["size"] = v
			}
			parts = append(parts, map[string]any{"kind": "file", "file": file})
			atts = append(atts, file)
		}
	}
	s.mu.RLock()
	ws := s.workspaces[id]
	if ws == nil || ws.removed {
		s.mu.RUnlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	name, f, silenced := ws.name, ws.feed, ws.talkToUserOff && s.gen >= Gen2026_08
	s.mu.RUnlock()
	if silenced {
		// enteros-core aeec8e47 handlers/activity.go:872-877: nothing is
		// written or broadcast.
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "talk_to_user_disabled", "hint": talkToUserHint})
		return
	}

	resp := map[string]any{"result": msg}
	if len(parts) > 0 {
		resp["parts"] = parts
	}
	summary := msg
	if len(summary) > 80 {
		summary = summary[:80]
	}
	rw := &row{
		id: newUUID(), workspaceID: id, activityType: "a2a_receive", method: "notify",
		summary: "Agent message: " + summary, status: "ok",
		responseBody: appendJSON(nil, resp, s.bodyOrder()),
	}
	f.commit(rw, s.encodeRow)

	ev := map[string]any{"message": msg, "name": name, "workspace_id": id}
	var attRaw json.RawMessage
	if len(atts) > 0 {
		attRaw = appendJSON(nil, atts, orderSorted)
		ev["attachments"] = attRaw
	}
	s.publish(id, "AGENT_MESSAGE", ev)
	s.logMu.Lock()
	s.notifies[id] = append(s.notifies[id], Notification{WorkspaceID: id, Message: msg, Attachments: attRaw, At: time.Now()})
	s.logMu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"status": "sent"})
}

const cursorGone = `{"error":"since_id cursor not found (row may have been pruned or belongs to a different workspace); omit since_id to reset"}`

func (s *Server) handleActivity(w http.ResponseWriter, r *http.Request, id string) {
	qs := r.URL.Query()
	q := activityQuery{typ: qs.Get("type"), source: qs.Get("source"), limit: 100}
	if n, err := strconv.Atoi(qs.Get("limit")); err == nil && n > 0 {
		q.limit = min(n, 500)
	}
	if q.source != "" && q.source != "canvas" && q.source != "agent" {
		writeError(w, http.StatusBadRequest, "source must be 'canvas' or 'agent'")
		return
	}
	if s.gen >= Gen2026_05 {
		if qs.Has("since_secs") {
			n, err := strconv.Atoi(qs.Get("since_secs"))
			if err != nil || n <= 0 {
				writeError(w, http.StatusBadRequest, "since_secs must be a positive integer")
				return
			}
			q.sinceSecs = min(n, 30*24*3600)
		}
		if v := qs.Get("peer_id"); v != "" {
			if !isUUID(v) {
				writeError(w, http.StatusBadRequest, "peer_id must be a UUID")
				return
			}
			q.peerID = strings.ToLower(v)
		}
		if v := qs.Get("before_ts"); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, "before_ts must be an RFC3339 timestamp (e.g. 2026-05-01T00:00:00Z)")
				return
			}
			q.before, q.hasBefore = t, true
		}
		if v := qs.Get("since_id"); v != "" {
			if !isUUID(v) {
				writeError(w, http.StatusInternalServerError, "cursor lookup failed")
				return
			}
			q.sinceID = strings.ToLower(v)
		}
	}
	if s.gen >= Gen2026_08 {
		// activity.go:318-319 (include, since 2026-05-21) and 528 (the
		// (created_at, seq) cursor) at enteros-core aeec8e47.
		q.tuple, q.peerInfo = true, includeFlagSet(qs.Get("include"), "peer_info")
	}
	f := s.feedOf(id)
	if f == nil {
		if q.sinceID != "" {
			writeRaw(w, http.StatusGone, []byte(cursorGone))
			return
		}
		writeRaw(w, http.StatusOK, []byte("[]"))
		return
	}
	var rows [][]byte
	var copies []row
	ok := f.query(&q, func(r *row) {
		if q.peerInfo {
			copies = append(copies, *r)
		} else {
			rows = append(rows, r.json)
		}
	})
	if !ok {
		writeRaw(w, http.StatusGone, []byte(cursorGone))
		return
	}
	if q.peerInfo {
		rows = s.withPeerInfo(r, copies)
	}
	if q.sinceID != "" {
		s.cursorRows.Add(int64(len(rows)))
	} else {
		s.windowRows.Add(int64(len(rows)))
	}
	writeRows(w, rows)
}

// pagePool recycles activity page buffers (a page of 500 rows is a few
// hundred KB).
var pagePool sync.Pool

// writeRows writes a JSON array of pre-encoded rows in one write, from an
// exactly sized pooled buffer.
func writeRows(w http.ResponseWriter, rows [][]byte) {
	size := 2
	for _, r := range rows {
		size += len(r) + 1
	}
	var buf []byte
	if p, ok := pagePool.Get().(*[]byte); ok && cap(*p) >= size {
		buf = (*p)[:0]
	} else {
		buf = make([]byte, 0, size)
	}
	buf = append(buf, '[')
	for i, r := range rows {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, r...)
	}
	buf = append(buf, ']')
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
	pagePool.Put(&buf)
}

var selfReportTypes = map[string]bool{
	"a2a_send": true, "a2a_receive": true, "task_update": true, "agent_log": true,
	"skill_promotion": true, "memory_write": true, "error": true,
}

// handleSelfReport is POST /workspaces/:id/activity.
func (s *Server) handleSelfReport(w http.ResponseWriter, _ *http.Request, id string, body []byte, admin bool) {
	var p struct {
		ActivityType string          `json:"activity_type"`
		SourceID     *string         `json:"source_id"`
		TargetID     *string         `json:"target_id"`
		Method       *string         `json:"method"`
		Summary      *string         `json:"summary"`
		RequestBody  json.RawMessage `json:"request_body"`
		ResponseBody json.RawMessage `json:"response_body"`
		DurationMS   *int            `json:"duration_ms"`
		Status       string          `json:"status"`
		ErrorDetail  *string         `json:"error_detail"`
	}
	if !bodyInto(body, &p) {
		writeError(w, http.StatusBadRequest, "invalid request body")
		return
	}
	if !selfReportTypes[p.ActivityType] {
		writeError(w, http.StatusBadRequest, "invalid activity_type: must be one of a2a_send, a2a_receive, task_update, agent_log, skill_promotion, memory_write, error")
		return
	}
	if p.SourceID != nil && *p.SourceID != "" && *p.SourceID != id && !admin {
		writeError(w, http.StatusForbidden, "source_id must match authenticated workspace")
		return
	}
	f := s.feedOf(id)
	if f == nil {
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	rw := &row{id: newUUID(), workspaceID: id, activityType: p.ActivityType, sourceID: id, status: "ok", methodNull: true}
	if p.TargetID != nil {
		rw.targetID = *p.TargetID
	}
	if p.Method != nil {
		rw.method, rw.methodNull = *p.Method, false
	}
	if p.Summary != nil {
		rw.summary = *p.Summary
	}
	if p.Status != "" {
		rw.status = p.Status
	}
	if p.ErrorDetail != nil {
		rw.errorDetail = *p.ErrorDetail
	}
	if p.DurationMS != nil {
		rw.durationMS, rw.hasDuration = *p.DurationMS, true
	}
	if v, err := decodeAny(p.RequestBody); err == nil && len(p.RequestBody) > 0 && v != nil {
		rw.requestBody = appendJSON(nil, v, s.bodyOrder())
	}
	if v, err := decodeAny(p.ResponseBody); err == nil && len(p.ResponseBody) > 0 && v != nil {
		rw.responseBody = appendJSON(nil, v, s.bodyOrder())
	}
	f.commit(rw, s.encodeRow)
	s.publish(id, "ACTIVITY_LOGGED", s.activityEvent(rw))
	writeJSON(w, http.StatusOK, map[string]string{"status": "logged"})
}

func (s *Server) handlePause(w http.ResponseWriter, id string) {
	s.mu.Lock()
	ws := s.workspaces[id]
	if ws == nil || ws.removed || ws.status == "paused" {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "workspace not found or already paused")
		return
	}
	ws.status = "paused"
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"paused_count": 1, "status": "paused"})
}

func (s *Server) handleResume(w http.ResponseWriter, id string) {
	s.mu.Lock()
	ws := s.workspaces[id]
	if ws == nil || ws.removed || ws.status != "paused" {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "workspace not found or not paused")
		return
	}
	// The platform answers "provisioning", then fails to provision an
	// external workspace (no template, no Docker) and marks it failed.
	ws.status = "failed"
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"resumed_count": 1, "status": "provisioning"})
}

func (s *Server) handleMintToken(w http.ResponseWriter, id string) {
	s.mu.Lock()
	ws := s.workspaces[id]
	if ws == nil || ws.removed {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	tok := s.mintLocked(ws)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"auth_token": tok, "workspace_id": id,
		"message": "Save this token now — it will not be shown again.",
	})
}
