// Package agentapi is the relay's agent API: a loopback-only HTTP server
// through which a handler acts as an agent while it runs (interim
// messages, asking a peer, peers and discovery, secrets), authorised by a
// per-message capability token, never by the workspace token. Go handlers
// get the same session as Request.Agent. See docs/agentapi.md.
package agentapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// tokenBytes is the capability token's entropy: 256 bits.
const tokenBytes = 32

// Server is the agent API. It serves from New until Close; Open hands out
// sessions. It is safe for concurrent use.
type Server struct {
	cfg  Config
	srv  *http.Server
	url  string
	done chan struct{}

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*Session
}

// New validates cfg, listens on its loopback address and serves until
// Close.
func New(cfg Config) (*Server, error) {
	cfg.SetDefaults()
	if err := checkLoopback(cfg.Listen); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("agentapi: listen on %s: %w", cfg.Listen, err)
	}
	s := &Server{
		cfg:      cfg,
		url:      "http://" + ln.Addr().String(),
		done:     make(chan struct{}),
		sessions: map[[sha256.Size]byte]*Session{},
	}
	s.srv = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("agentapi: server stopped", "error", err)
		}
	}()
	cfg.Logger.Info("agent API listening", "url", s.url, "secrets", cfg.Secrets, "ask", cfg.Asker != nil)
	return s, nil
}

// URL is the API's base URL, http://127.0.0.1:<port>.
func (s *Server) URL() string { return s.url }

// Close stops serving at once and ends every session.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	s.mu.Lock()
	clear(s.sessions)
	s.mu.Unlock()
	return err
}

// Open starts the session of one handler run of in: a fresh capability
// token that is valid until deadline or until end is called. Calls made
// over HTTP run with ctx's values (the handler's context: the dispatcher
// keeps what an Asker needs there). It implements dispatcher.AgentAPI.
func (s *Server) Open(ctx context.Context, in *events.Inbound, deadline time.Time) (handler.Agent, func()) {
	var raw [tokenBytes]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	sess := &Session{srv: s, token: tok, in: *in, deadline: deadline, key: sha256.Sum256([]byte(tok)), base: context.WithoutCancel(ctx)}
	s.mu.Lock()
	s.sessions[sess.key] = sess
	s.mu.Unlock()
	s.cfg.Logger.DebugContext(ctx, "agentapi: session opened", "workspace", in.WorkspaceID, "activity", in.ActivityID, "until", deadline)
	return sess, sess.end
}

// session finds the live session of a capability token, or nil. Tokens
// are looked up by their SHA-256, so the map never holds one and a lookup
// leaks nothing about other tokens through its timing.
func (s *Server) session(token string) *Session {
	if token == "" {
		return nil
	}
	key := sha256.Sum256([]byte(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[key]
	if sess != nil && !time.Now().Before(sess.deadline) {
		delete(s.sessions, key)
		return nil
	}
	return sess
}

func (s *Server) forget(key [sha256.Size]byte) {
	s.mu.Lock()
	delete(s.sessions, key)
	s.mu.Unlock()
}
