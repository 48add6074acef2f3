package moleculetest

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
)

type registerBody struct {
	ID           string          `json:"id"`
	URL          *string         `json:"url"`
	AgentCard    json.RawMessage `json:"agent_card"`
	DeliveryMode *string         `json:"delivery_mode"`
	Kind         *string         `json:"kind"`
}

var (
	errBadScheme = errors.New("url scheme must be http or https")
	errNoHost    = errors.New("url has no host")
	errLoopback  = errors.New("url resolves to a loopback address")
	errLinkLocal = errors.New("url resolves to a link-local address")
	errPrivate   = errors.New("url resolves to a private address")
)

// checkAgentURL is the register SSRF check: http(s) only, IP literals must
// not be loopback, link-local, unspecified or private. Host names are not
// resolved; "localhost" is allowed by name, as on the platform.
func checkAgentURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errBadScheme
	}
	host := u.Hostname()
	if host == "" {
		return errNoHost
	}
	if ip := net.ParseIP(host); ip != nil {
		switch {
		case ip.IsLoopback(), ip.IsUnspecified():
			return errLoopback
		case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
			return errLinkLocal
		case ip.IsPrivate():
			return errPrivate
		}
	}
	return nil
}

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request, body []byte) {
	p, regURL, mode, refusal := s.parseRegister(body)
	if refusal != "" {
		writeError(w, http.StatusBadRequest, refusal)
		return
	}
	s.mu.Lock()
	ws := s.workspaces[p.ID]
	status, refusal := s.registerRefusalLocked(r, ws, regURL, &mode)
	if refusal != "" {
		s.mu.Unlock()
		writeError(w, status, refusal)
		return
	}
	resp, card := s.registerLocked(ws, p, regURL, mode)
	s.mu.Unlock()

	ev := map[string]any{"agent_card": json.RawMessage(card), "url": regURL}
	if s.gen >= Gen2026_05 {
		ev["delivery_mode"] = mode
		if mode == "poll" {
			ev["url"] = ""
		}
	}
	s.publish(p.ID, "WORKSPACE_ONLINE", ev)
	writeJSON(w, http.StatusOK, resp)
}

// parseRegister reads a register body and the checks that need no state:
// the registered URL, the asked delivery mode ("" when not given), or the
// 400 message that refuses it.
func (s *Server) parseRegister(body []byte) (p registerBody, regURL, mode, refusal string) {
	if !bodyInto(body, &p) || !isUUID(p.ID) || len(p.AgentCard) == 0 {
		return p, "", "", "invalid request body"
	}
	p.ID = strings.ToLower(p.ID)
	if p.URL != nil {
		regURL = *p.URL
	}
	if s.gen == Gen2026_04 {
		if regURL == "" || checkAgentURL(regURL) != nil {
			return p, "", "", "invalid request body"
		}
		return p, regURL, "", ""
	}
	if p.DeliveryMode != nil && *p.DeliveryMode != "" {
		mode = *p.DeliveryMode
		if mode != "push" && mode != "poll" {
			return p, "", "", "delivery_mode must be 'push' or 'poll'"
		}
	}
	return p, regURL, mode, ""
}

// registerRefusalLocked checks the bearer of a workspace that has a live
// token and settles the delivery mode (NEW: the asked one, else the
// stored one, else push, which needs a public URL; OLD: always push). It
// returns the status and message of a refusal, or "".
func (s *Server) registerRefusalLocked(r *http.Request, ws *workspace, regURL string, mode *string) (int, string) {
	if ws != nil && ws.liveTokens > 0 {
		tok := bearer(r)
		if tok == "" {
			return http.StatusUnauthorized, "missing workspace auth token"
		}
		if !s.validLocked(tok, ws) {
			return http.StatusUnauthorized, "invalid workspace auth token"
		}
	}
	if s.gen < Gen2026_05 {
		*mode = "push"
		return 0, ""
	}
	if *mode == "" {
		*mode = "push"
		if ws != nil {
			*mode = ws.deliveryMode
		}
	}
	if *mode == "push" {
		if regURL == "" {
			return http.StatusBadRequest, "url is required for push-mode workspaces"
		}
		if err := checkAgentURL(regURL); err != nil {
			return http.StatusBadRequest, "invalid url: " + err.Error()
		}
	}
	return 0, ""
}

// registerLocked records an accepted registration and returns the answer
// and the agent card to announce.
func (s *Server) registerLocked(ws *workspace, p registerBody, regURL, mode string) (map[string]any, json.RawMessage) {
	resp := map[string]any{"status": "registered"}
	if ws == nil {
		ws = s.newWorkspaceLocked(p.ID, p.ID, "")
		ws.runtime, ws.tier = "langgraph", 1
	}
	if ws.liveTokens == 0 {
		// First registration of a token-less row, or a removed row whose
		// tokens were revoked: a token is minted (it never validates for
		// a removed row).
		resp["auth_token"] = s.mintLocked(ws)
	}
	if !ws.removed {
		ws.status = "online"
		ws.url = regURL
		ws.agentCard = append(json.RawMessage(nil), p.AgentCard...)
		ws.deliveryMode = mode
		ws.registrations++
	}
	if s.gen >= Gen2026_05 {
		resp["delivery_mode"] = mode
		resp["platform_inbound_secret"] = ws.secret
	}
	if ws.removed {
		return resp, p.AgentCard
	}
	return resp, ws.agentCard
}

type heartbeatBody struct {
	WorkspaceID     string           `json:"workspace_id"`
	ErrorRate       float64          `json:"error_rate"`
	SampleError     string           `json:"sample_error"`
	ActiveTasks     int              `json:"active_tasks"`
	UptimeSeconds   int64            `json:"uptime_seconds"`
	CurrentTask     string           `json:"current_task"`
	MonthlySpend    int64            `json:"monthly_spend"`
	RuntimeState    string           `json:"runtime_state"`
	RuntimeMetadata *runtimeMetadata `json:"runtime_metadata"`
	AgentCard       json.RawMessage  `json:"agent_card"`
	// IsBusy is read from Gen2026_08 on (registry.go:1411-1440).
	IsBusy *bool `json:"is_busy"`
}

type runtimeMetadata struct {
	Capabilities       map[string]bool `json:"capabilities"`
	IdleTimeoutSeconds int             `json:"idle_timeout_seconds"`
}

// tokenGate is requireWorkspaceToken: the bearer of ws when it has a live
// token; grandfathered otherwise. It writes the 401 and reports false.
func (s *Server) tokenGateLocked(w http.ResponseWriter, r *http.Request, ws *workspace) bool {
	if ws == nil || ws.liveTokens == 0 {
		return true
	}
	tok := bearer(r)
	if tok == "" {
		writeError(w, http.StatusUnauthorized, "missing workspace auth token")
		return false
	}
	if !s.validLocked(tok, ws) {
		writeError(w, http.StatusUnauthorized, "invalid workspace auth token")
		return false
	}
	return true
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request, body []byte) {
	var p heartbeatBody
	if !bodyInto(body, &p) || p.WorkspaceID == "" {
		writeError(w, http.StatusBadRequest, "invalid request body")
		return
	}
	s.mu.Lock()
	ws := s.workspaces[p.WorkspaceID]
	if !s.tokenGateLocked(w, r, ws) {
		s.mu.Unlock()
		return
	}
	resp := map[string]any{"status": "ok"}
	if ws != nil && s.gen >= Gen2026_05 {
		resp["platform_inbound_secret"] = ws.secret
	}
	taskChanged := false
	if ws != nil && !ws.removed {
		ws.heartbeats++
		ws.lastHeartbeat = append(json.RawMessage(nil), body...)
		taskChanged = ws.currentTask != p.CurrentTask
		ws.activeTasks, ws.uptime, ws.currentTask, ws.errorRate = p.ActiveTasks, p.UptimeSeconds, p.CurrentTask, p.ErrorRate
		if s.gen >= Gen2026_08 {
			// is_busy = COALESCE($is_busy, active_tasks > 0) (registry.go:1440),
			// and every answer hands down desired_generation (1677).
			ws.busy = p.ActiveTasks > 0
			if p.IsBusy != nil {
				ws.busy = *p.IsBusy
			}
			resp["generation"] = ws.generation
		}
		ws.idleTimeout = 0
		statusMgmt := false
		if p.RuntimeMetadata != nil {
			if p.RuntimeMetadata.IdleTimeoutSeconds > 0 {
				ws.idleTimeout = secondsDur(p.RuntimeMetadata.IdleTimeoutSeconds)
			}
			statusMgmt = p.RuntimeMetadata.Capabilities["status_mgmt"]
		}
		if s.gen >= Gen2026_05 && len(p.AgentCard) > 0 && len(ws.agentCard) == 0 {
			ws.agentCard = append(json.RawMessage(nil), p.AgentCard...)
		}
		switch ws.status {
		case "offline", "provisioning":
			ws.status = "online"
		case "awaiting_agent":
			if s.gen >= Gen2026_05 {
				ws.status = "online"
			}
		}
		switch {
		case ws.status == "online" && p.RuntimeState == "wedged":
			ws.status = "degraded"
		case ws.status == "online" && !statusMgmt && p.ErrorRate >= 0.5:
			ws.status = "degraded"
		case ws.status == "degraded" && p.RuntimeState == "" && (statusMgmt || p.ErrorRate < 0.1):
			ws.status = "online"
		}
	}
	s.mu.Unlock()
	s.publish(p.WorkspaceID, "WORKSPACE_HEARTBEAT", map[string]any{"active_tasks": p.ActiveTasks, "uptime_seconds": p.UptimeSeconds})
	if taskChanged {
		s.publish(p.WorkspaceID, "TASK_UPDATED", map[string]any{"active_tasks": p.ActiveTasks, "current_task": p.CurrentTask})
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleUpdateCard(w http.ResponseWriter, r *http.Request, body []byte) {
	var p struct {
		WorkspaceID string          `json:"workspace_id"`
		AgentCard   json.RawMessage `json:"agent_card"`
	}
	if !bodyInto(body, &p) || p.WorkspaceID == "" || len(p.AgentCard) == 0 {
		writeError(w, http.StatusBadRequest, "invalid request body")
		return
	}
	s.mu.Lock()
	ws := s.workspaces[p.WorkspaceID]
	if !s.tokenGateLocked(w, r, ws) {
		s.mu.Unlock()
		return
	}
	if ws != nil && !ws.removed {
		ws.agentCard = append(json.RawMessage(nil), p.AgentCard...)
	}
	s.mu.Unlock()
	s.publish(p.WorkspaceID, "AGENT_CARD_UPDATED", map[string]any{"agent_card": p.AgentCard})
	writeJSON(w, http.StatusOK, map[string]string{"status": "updated"})
}

func (s *Server) peerJSONLocked(p *workspace) map[string]any {
	var parent, card any
	if p.parentID != "" {
		parent = p.parentID
	}
	if len(p.agentCard) > 0 {
		card = p.agentCard
	}
	return map[string]any{
		"id": p.id, "name": p.name, "role": nullIfEmpty(p.role), "tier": p.tier, "status": p.status,
		"url": p.url, "agent_card": card, "parent_id": parent, "active_tasks": p.activeTasks,
	}
}

func (s *Server) handlePeers(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ws := s.workspaces[id]
	if ws == nil {
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	// A removed workspace's tokens are revoked: its bearer is refused
	// (observed), where heartbeat would grandfather it.
	if ws.removed {
		if bearer(r) == "" {
			writeError(w, http.StatusUnauthorized, "missing workspace auth token")
		} else {
			writeError(w, http.StatusUnauthorized, "invalid workspace auth token")
		}
		return
	}
	if !s.tokenGateLocked(w, r, ws) {
		return
	}
	q := strings.ToLower(r.URL.Query().Get("q"))
	out := make([]map[string]any, 0)
	add := func(p *workspace) {
		if p == nil || p.removed || p == ws {
			return
		}
		if q != "" && !strings.Contains(strings.ToLower(p.name), q) {
			return
		}
		out = append(out, s.peerJSONLocked(p))
	}
	for _, p := range s.order { // siblings (all other roots for a root)
		if p.parentID == ws.parentID {
			add(p)
		}
	}
	for _, p := range s.order { // children
		if p.parentID == ws.id {
			add(p)
		}
	}
	if ws.parentID != "" {
		add(s.workspaces[ws.parentID])
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleDiscover(w http.ResponseWriter, r *http.Request, target string) {
	caller := r.Header.Get("X-Workspace-ID")
	if caller == "" {
		writeError(w, http.StatusBadRequest, "X-Workspace-ID header is required")
		return
	}
	s.mu.RLock()
	cw := s.workspaces[caller]
	if cw != nil && (cw.liveTokens > 0 || cw.removed) {
		tok := bearer(r)
		if tok == "" {
			s.mu.RUnlock()
			writeError(w, http.StatusUnauthorized, "missing workspace auth token")
			return
		}
		if !s.validLocked(tok, cw) {
			s.mu.RUnlock()
			writeError(w, http.StatusUnauthorized, "invalid workspace auth token")
			return
		}
	}
	tw := s.workspaces[target]
	if tw == nil || tw.removed {
		s.mu.RUnlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	if !s.canCommunicateLocked(cw, tw) {
		s.mu.RUnlock()
		writeError(w, http.StatusForbidden, "not authorized to discover this workspace")
		return
	}
	u, name, status := tw.url, tw.name, tw.status
	s.mu.RUnlock()
	switch {
	case u == "":
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "workspace not available", "status": status})
	case !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://"):
		writeError(w, http.StatusServiceUnavailable, "workspace URL failed safety check")
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": target, "name": name, "url": u})
	}
}
