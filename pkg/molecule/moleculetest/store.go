package moleculetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// workspace is one row of the workspaces table plus the platform's
// in-memory overrides. Fields are guarded by Server.mu; feed has its own
// lock.
type workspace struct {
	id, name, parentID string
	role               string // "" = null
	runtime            string
	tier               int
	status             string
	deliveryMode       string
	url                string
	agentCard          json.RawMessage
	secret             string
	removed            bool
	removedAt          time.Time

	registrations int
	heartbeats    int
	lastHeartbeat json.RawMessage
	activeTasks   int
	uptime        int64
	currentTask   string
	errorRate     float64
	idleTimeout   time.Duration
	// busy is the platform's is_busy (Gen2026_08): the heartbeat's is_busy
	// when sent, else active_tasks > 0.
	busy bool
	// generation is desired_generation, echoed by every heartbeat
	// (Gen2026_08).
	generation int64

	broadcastEnabled     bool
	chatSessionStartedAt time.Time

	liveTokens int
	ackedSeq   int64 // inbox_delivery_state.last_acked_seq (2026-08)
	// 2026-08 settings (SetTalkToUser, SetCanDelegate, SetBudgetExceeded,
	// SetConciergeWarming); the zero values are the platform's defaults.
	talkToUserOff  bool
	cannotDelegate bool
	budgetOver     []string
	warming        bool
	secrets        map[string]string
	queue          map[string]string // push queue: messageId -> queue id

	feed *feed
}

// token is a minted bearer. A token validates only while it is not
// revoked and its workspace is not removed.
type token struct {
	ws      *workspace
	revoked bool
}

// newUUID returns a random (version 4) UUID.
func newUUID() string { return uuid.NewString() }

// isUUID reports whether v has the canonical 8-4-4-4-12 hex form.
func isUUID(v string) bool { return len(v) == 36 && uuid.Validate(v) == nil }

// newToken returns 32 random bytes, base64url without padding (43 chars).
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (s *Server) newWorkspaceLocked(id, name, parent string) *workspace {
	w := &workspace{
		id:           id,
		name:         name,
		parentID:     parent,
		runtime:      "external",
		tier:         3,
		deliveryMode: "push",
		secret:       newToken(),
		secrets:      map[string]string{},
		queue:        map[string]string{},
		feed:         newFeed(),
	}
	w.feed.ties = s.ties
	if s.gen >= Gen2026_05 {
		w.status = "awaiting_agent"
	} else {
		w.status = "provisioning"
	}
	s.workspaces[id] = w
	s.order = append(s.order, w)
	return w
}

func (s *Server) mintLocked(w *workspace) string {
	tok := newToken()
	s.tokens[tok] = &token{ws: w}
	w.liveTokens++
	return tok
}

func (s *Server) create(name, parent string) Workspace {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.newWorkspaceLocked(newUUID(), name, parent)
	return Workspace{ID: w.id, Name: w.name, Token: s.mintLocked(w)}
}

func (s *Server) remove(id string) bool {
	s.mu.Lock()
	w := s.workspaces[id]
	if w == nil || w.removed {
		s.mu.Unlock()
		return false
	}
	w.removed = true
	w.removedAt = nowMicro()
	for _, t := range s.tokens {
		if t.ws == w && !t.revoked {
			t.revoked = true
		}
	}
	w.liveTokens = 0
	s.mu.Unlock()
	s.publish(id, "WORKSPACE_REMOVED", map[string]any{"cascade_deleted": 0})
	return true
}

// validLocked reports whether tok authenticates as workspace w.
func (s *Server) validLocked(tok string, w *workspace) bool {
	t := s.tokens[tok]
	return t != nil && w != nil && t.ws == w && !t.revoked && !w.removed
}

// ownerLocked returns the live workspace a token authenticates, or nil.
func (s *Server) ownerLocked(tok string) *workspace {
	t := s.tokens[tok]
	if t == nil || t.revoked || t.ws.removed {
		return nil
	}
	return t.ws
}

func (s *Server) feedOf(id string) *feed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if w := s.workspaces[id]; w != nil {
		return w.feed
	}
	return nil
}

// ancestorLocked reports whether a is a strict ancestor of d.
func (s *Server) ancestorLocked(a, d *workspace) bool {
	for p, n := d.parentID, 0; p != "" && n < 1000; n++ {
		if p == a.id {
			return true
		}
		pw := s.workspaces[p]
		if pw == nil {
			return false
		}
		p = pw.parentID
	}
	return false
}

// canCommunicateLocked is registry.CanCommunicate: self, siblings (two
// roots included), ancestor and descendant in either direction.
func (s *Server) canCommunicateLocked(a, b *workspace) bool {
	if a == nil || b == nil {
		return false
	}
	if a == b || a.parentID == b.parentID {
		return true
	}
	return s.ancestorLocked(a, b) || s.ancestorLocked(b, a)
}

// nowMicro is the current UTC time truncated to the microsecond.
func nowMicro() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// formatTime renders a timestamp the way the platform's Go encoder does
// (RFC 3339, fractional seconds without trailing zeros).
func formatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
}

func canvasBody(text, role string) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      newUUID(),
		"method":  "message/send",
		"params": map[string]any{
			"message": map[string]any{
				"role":      role,
				"messageId": newUUID(),
				"parts":     []any{map[string]any{"kind": "text", "text": text}},
			},
			"metadata": map[string]any{"history": []any{}},
		},
	})
	return b
}

func peerBody(text string) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      newUUID(),
		"method":  "message/send",
		"params": map[string]any{
			"message": map[string]any{
				"role":      "user",
				"messageId": newUUID(),
				"parts":     []any{map[string]any{"kind": "text", "text": text}},
			},
		},
	})
	return b
}

// do sends a request to the server itself, adding the tenant header when
// the guard is on.
func (s *Server) do(ctx context.Context, method, path string, header http.Header, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header[k] = append([]string(nil), v...)
	}
	if req.Header.Get("Content-Type") == "" && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.org != "" && req.Header.Get("X-Molecule-Org-Id") == "" {
		req.Header.Set("X-Molecule-Org-Id", s.org)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
