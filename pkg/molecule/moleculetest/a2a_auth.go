package moleculetest

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// handleA2A08 is POST /workspaces/:id/a2a on 2026-08 (enteros-core
// aeec8e47 handlers/a2a_proxy.go:457 ProxyA2A and :697 proxyA2ARequest),
// in the platform's order: body cap, system-caller prefix, caller
// authentication, hierarchy, budget, normalisation, can_delegate, the
// concierge warming gate, then delivery.
func (s *Server) handleA2A08(w http.ResponseWriter, r *http.Request, id string, body []byte) {
	if len(body) > maxProxyRequestBody {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{
			"error":     "request body exceeds " + strconv.Itoa(maxProxyRequestBody) + " byte limit: A2A body exceeds size limit",
			"truncated": true, "max_bytes": maxProxyRequestBody,
		})
		return
	}
	claimed := r.Header.Get("X-Workspace-ID")
	for _, p := range []string{"webhook:", "system:", "test:", "channel:"} {
		if strings.HasPrefix(claimed, p) {
			writeError(w, http.StatusForbidden, "invalid caller ID")
			return
		}
	}
	caller, canvas, ok := s.authenticateCaller(w, r, claimed)
	if !ok {
		return
	}
	s.mu.RLock()
	target := s.workspaces[id]
	if target == nil {
		s.mu.RUnlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	peer := caller != "" && caller != id && !canvas
	if peer && !s.canCommunicateLocked(s.workspaces[caller], target) {
		s.mu.RUnlock()
		writeError(w, http.StatusForbidden, "access denied: workspaces cannot communicate per hierarchy rules")
		return
	}
	c := a2aCall{id: id, name: target.name, source: caller, mode: target.deliveryMode, agentURL: target.url,
		status: target.status, idle: target.idleTimeout, f: target.feed}
	over := append([]string(nil), target.budgetOver...)
	warming := target.warming
	callerLocked := peer && s.workspaces[caller] != nil && s.workspaces[caller].cannotDelegate
	s.mu.RUnlock()

	if len(over) > 0 {
		writeJSON(w, http.StatusPaymentRequired, map[string]any{"error": "workspace budget limit exceeded", "exceeded_periods": over})
		return
	}
	m, err := decodeObject(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON")
		return
	}
	c.m, c.method = normalizeA2A(m)
	if callerLocked && c.method == "message/send" {
		writeError(w, http.StatusForbidden, "tool call failed")
		return
	}
	if warming && caller != id {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error":   "concierge is warming up (verifying management tools) — retry shortly",
			"warming": true, "retry_after": 5,
		})
		return
	}
	s.deliver(w, r, c)
}

// authenticateCaller is authenticateA2AHTTPCaller (enteros-core aeec8e47
// handlers/a2a_proxy_helpers.go:991-1109) on a self-hosted platform (no
// session verifier, CANVAS_PROXY_URL set): X-Workspace-ID is only a
// claim. A same-origin canvas (Origin or Referer naming the platform's
// own URL) and the admin token are canvas-class callers; a workspace
// bearer is the workspace it belongs to, and must equal the claim when
// there is one. Org tokens are not modelled. It reports false after
// writing the 401.
func (s *Server) authenticateCaller(w http.ResponseWriter, r *http.Request, claimed string) (caller string, canvas, ok bool) {
	if s.sameOriginCanvas(r) {
		return claimed, true, true
	}
	tok := bearer(r)
	if tok == "" {
		writeError(w, http.StatusUnauthorized, "missing caller auth token")
		return "", false, false
	}
	if tok == s.admin {
		return claimed, true, true
	}
	s.mu.RLock()
	t := s.tokens[tok]
	var owner string
	live := t != nil && !t.revoked && !t.ws.removed
	if t != nil {
		owner = t.ws.id
	}
	s.mu.RUnlock()
	switch {
	case t == nil:
		writeError(w, http.StatusUnauthorized, "invalid caller auth token")
		return "", false, false
	case claimed != "" && claimed != owner:
		writeError(w, http.StatusUnauthorized, "caller ID does not match workspace auth token")
		return "", false, false
	case !live:
		writeError(w, http.StatusUnauthorized, "invalid caller auth token")
		return "", false, false
	}
	return owner, false, true
}

// sameOriginCanvas is middleware.isSameOriginCanvas (enteros-core aeec8e47
// middleware/wsauth_middleware.go:575-600) with the double's URL as the
// request's host.
func (s *Server) sameOriginCanvas(r *http.Request) bool {
	if ref := r.Header.Get("Referer"); ref != "" && (ref == s.url || strings.HasPrefix(ref, s.url+"/")) {
		return true
	}
	return r.Header.Get("Origin") == s.url
}

// nowSeconds is a plugin-backed memory's created_at: the v2 shim formats
// it to the second (enteros-core aeec8e47 handlers/memories.go:391).
func nowSeconds() string { return time.Now().UTC().Format("2006-01-02T15:04:05Z") }
