package moleculetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxBody is how much of a request body the double reads: one byte more
// than the 2026-08 /a2a cap, so that cap can be enforced.
const maxBody = maxProxyRequestBody + 1

// recorder wraps the ResponseWriter to capture the status.
type recorder struct {
	http.ResponseWriter
	s      *Server
	rec    *RecordedRequest
	status int
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.rec != nil {
			w.s.reqMu.Lock()
			w.rec.Status = code
			w.s.reqMu.Unlock()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets handlers flush through the wrapper.
func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap serves http.ResponseController.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) record(r *http.Request, body []byte) *RecordedRequest {
	if s.reqLimit < 0 {
		return nil
	}
	rec := &RecordedRequest{
		Method: r.Method,
		Path:   r.URL.Path,
		Query:  r.URL.RawQuery,
		Header: r.Header.Clone(),
		Body:   body,
		At:     time.Now(),
	}
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	if s.reqLimit > 0 && len(s.requests) >= s.reqLimit {
		s.requests[s.reqStart] = rec
		s.reqStart = (s.reqStart + 1) % len(s.requests)
	} else {
		s.requests = append(s.requests, rec)
	}
	return rec
}

func (s *Server) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil && !isChatUploadPath(r.URL.Path) {
		body, _ = io.ReadAll(io.LimitReader(r.Body, maxBody))
	}
	w := &recorder{ResponseWriter: rw, s: s}
	w.rec = s.record(r, body)
	if w.rec != nil {
		defer func() {
			s.reqMu.Lock()
			w.rec.Done = time.Now()
			s.reqMu.Unlock()
		}()
	}

	proceed, after := s.applyFault(w, r)
	if !proceed {
		return
	}
	if !s.rateLimit(w, r) {
		return
	}
	if !s.tenantGuard(r) {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if after == nil {
		s.route(w, r, body)
		return
	}
	// The handler's answer is discarded; the fault's is sent instead.
	s.route(&recorder{ResponseWriter: httptest.NewRecorder(), s: s}, r, body)
	writeFault(w, after)
}

// writeFault answers f's Status, Header and Body.
func writeFault(w http.ResponseWriter, f *Fault) {
	for k, v := range f.Header {
		w.Header()[k] = append([]string(nil), v...)
	}
	if w.Header().Get("Content-Type") == "" && f.Body != "" {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	}
	w.WriteHeader(f.Status)
	_, _ = io.WriteString(w, f.Body)
}

// ---- faults ----

type faultState struct {
	Fault
	left int
}

// applyFault applies the first matching fault. It reports whether the
// real handler should still run, and the fault to answer after it runs
// (Fault.AfterHandler), if any.
func (s *Server) applyFault(w *recorder, r *http.Request) (bool, *Fault) {
	s.faultMu.Lock()
	var f *Fault
	for i, fs := range s.faults {
		if (fs.Method == "" || fs.Method == r.Method) && strings.HasPrefix(r.URL.Path, fs.PathPrefix) && strings.Contains(r.URL.RawQuery, fs.QueryContains) {
			if fs.Rate > 0 && !s.draw(fs.Rate) {
				continue
			}
			cp := fs.Fault
			f = &cp
			if fs.Count > 0 {
				fs.left--
				if fs.left <= 0 {
					s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
				}
			}
			break
		}
	}
	s.faultMu.Unlock()
	if f == nil {
		return true, nil
	}
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return false, nil
		case <-s.ctx.Done():
			t.Stop()
			return false, nil
		}
	}
	switch {
	case f.Drop:
		conn, _, err := http.NewResponseController(w.ResponseWriter).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return false, nil
	case f.Malformed:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `<html><body>502 Bad Gateway</body></html>{"truncated":`)
		return false, nil
	case f.Status != 0 && f.AfterHandler:
		return true, f
	case f.Status != 0:
		writeFault(w, f)
		return false, nil
	}
	for k, v := range f.Header {
		w.Header()[k] = append([]string(nil), v...)
	}
	return true, nil
}

// draw reports true with probability p.
func (s *Server) draw(p float64) bool {
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.rand.Float64() < p
}

// ---- rate limit ----

type bucket struct {
	start time.Time
	count int
}

type rateLimiter struct {
	limit   int
	window  time.Duration
	mu      sync.Mutex
	buckets map[string]*bucket
}

// bucketKey is the NEW platform's key: the org header, else sha256 of
// the bearer, else the peer IP.
func bucketKey(r *http.Request) string {
	if org := r.Header.Get("X-Molecule-Org-Id"); org != "" {
		return "org:" + org
	}
	if tok := bearer(r); tok != "" {
		sum := sha256.Sum256([]byte(tok))
		return "tok:" + string(sum[:])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

func (s *Server) rateLimit(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	if s.rl.limit <= 0 {
		h.Set("X-RateLimit-Limit", "unlimited")
		return true
	}
	key := bucketKey(r)
	now := time.Now()
	s.rl.mu.Lock()
	b := s.rl.buckets[key]
	if b == nil || now.Sub(b.start) >= s.rl.window {
		b = &bucket{start: now}
		s.rl.buckets[key] = b
	}
	b.count++
	count, start := b.count, b.start
	s.rl.mu.Unlock()

	reset := int(math.Ceil(start.Add(s.rl.window).Sub(now).Seconds()))
	if reset < 1 {
		reset = 1
	}
	remaining := s.rl.limit - count
	if remaining < 0 {
		remaining = 0
	}
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.rl.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.Itoa(reset))
	if count > s.rl.limit {
		h.Set("Retry-After", strconv.Itoa(reset))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "rate limit exceeded", "retry_after": reset})
		return false
	}
	return true
}

// ---- tenant guard ----

func (s *Server) tenantGuard(r *http.Request) bool {
	if s.org == "" {
		return true
	}
	switch p := r.URL.Path; {
	case p == "/health", p == "/metrics", p == "/registry/register", p == "/registry/heartbeat", strings.HasPrefix(p, "/cp/"):
		return true
	}
	if r.Header.Get("X-Molecule-Org-Id") == s.org {
		return true
	}
	if o := r.Header.Get("Origin"); o != "" && o == s.url {
		return true
	}
	if ref := r.Header.Get("Referer"); ref != "" && (ref == s.url || strings.HasPrefix(ref, s.url+"/")) {
		return true
	}
	return false
}

// ---- helpers ----

// bearer is wsauth.BearerTokenFromHeader: "Bearer " (case-sensitive),
// rest trimmed.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Bearer ") {
		return ""
	}
	return strings.TrimSpace(h[len("Bearer "):])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// ---- routing ----

func (s *Server) route(w http.ResponseWriter, r *http.Request, body []byte) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	m := r.Method
	switch {
	case len(parts) == 1 && parts[0] == "health" && m == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	case len(parts) == 1 && parts[0] == "metrics" && m == http.MethodGet:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "# molecule platform double\n")
		return
	case len(parts) >= 2 && parts[0] == "registry":
		switch {
		case len(parts) == 2 && parts[1] == "register" && m == http.MethodPost:
			s.handleRegister(w, r, body)
			return
		case len(parts) == 2 && parts[1] == "heartbeat" && m == http.MethodPost:
			s.handleHeartbeat(w, r, body)
			return
		case len(parts) == 2 && parts[1] == "update-card" && m == http.MethodPost:
			s.handleUpdateCard(w, r, body)
			return
		case len(parts) == 3 && parts[2] == "peers" && m == http.MethodGet:
			s.handlePeers(w, r, parts[1])
			return
		case len(parts) == 3 && parts[1] == "discover" && m == http.MethodGet:
			s.handleDiscover(w, r, parts[2])
			return
		}
	case len(parts) >= 1 && parts[0] == "workspaces":
		if len(parts) == 1 && m == http.MethodPost {
			s.handleCreate(w, r, body)
			return
		}
		if len(parts) == 2 {
			switch m {
			case http.MethodGet:
				s.handleGetWorkspace(w, r, parts[1])
				return
			case http.MethodDelete:
				s.handleDelete(w, r, parts[1])
				return
			}
		}
		if len(parts) >= 3 {
			s.routeWorkspace(w, r, body, parts[1], parts[2:])
			return
		}
	}
	writeError(w, http.StatusNotFound, "not found")
}

func (s *Server) routeWorkspace(w http.ResponseWriter, r *http.Request, body []byte, id string, rest []string) {
	m := r.Method
	sub := strings.Join(rest, "/")
	if sub == "a2a" && m == http.MethodPost {
		s.handleA2A(w, r, id, body)
		return
	}
	known := false
	switch {
	case sub == "state" && m == http.MethodGet,
		sub == "secrets/values" && m == http.MethodGet,
		sub == "notify" && m == http.MethodPost,
		sub == "activity" && (m == http.MethodGet || m == http.MethodPost),
		sub == "activity/ack" && m == http.MethodPost && s.gen >= Gen2026_08,
		sub == "pause" && m == http.MethodPost,
		sub == "resume" && m == http.MethodPost,
		sub == "events/stream" && m == http.MethodGet,
		sub == "tokens" && m == http.MethodPost,
		sub == "memories" && (m == http.MethodGet || m == http.MethodPost),
		isUploadRoute(rest, m),
		sub == "chat/uploads" && m == http.MethodPost,
		sub == "chat/download" && m == http.MethodGet:
		known = true
	case (sub == "broadcast" || sub == "chat-session/new") && m == http.MethodPost:
		known = s.gen >= Gen2026_08
	}
	if !known {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	// WorkspaceAuth middleware: admin token, or a live token bound to :id.
	tok := bearer(r)
	if tok == "" {
		writeError(w, http.StatusUnauthorized, "missing workspace auth token")
		return
	}
	admin := tok == s.admin
	if !admin {
		s.mu.RLock()
		ok := s.validLocked(tok, s.workspaces[id])
		s.mu.RUnlock()
		if !ok {
			writeError(w, http.StatusUnauthorized, "invalid workspace auth token")
			return
		}
	}
	switch {
	case sub == "state":
		s.handleState(w, r, id, admin)
	case sub == "secrets/values":
		s.handleSecrets(w, r, id, admin)
	case sub == "notify":
		s.handleNotify(w, r, id, body)
	case sub == "activity/ack":
		s.handleAck(w, id, body)
	case sub == "activity" && m == http.MethodGet:
		s.handleActivity(w, r, id)
	case sub == "activity":
		s.handleSelfReport(w, r, id, body, admin)
	case sub == "pause":
		s.handlePause(w, id)
	case sub == "resume":
		s.handleResume(w, id)
	case sub == "events/stream":
		s.handleSSE(w, r, id)
	case sub == "tokens":
		s.handleMintToken(w, id)
	case sub == "memories":
		s.handleMemories(w, r, id, body)
	case sub == "broadcast":
		s.handleBroadcast(w, id, body)
	case sub == "chat-session/new":
		s.handleNewChatSession(w, id)
	case sub == "chat/uploads":
		s.handleChatUpload(w, r, id)
	case sub == "chat/download":
		s.handleChatDownload(w, r, id)
	case isUploadRoute(rest, m) && rest[2] == "content":
		s.handleUploadContent(w, id, rest[1])
	default:
		s.handleUploadAck(w, id, rest[1])
	}
}

// bodyObject decodes a request body into v, reporting success.
func bodyInto(body []byte, v any) bool {
	if len(bytes.TrimSpace(body)) == 0 {
		return false
	}
	return json.Unmarshal(body, v) == nil
}
