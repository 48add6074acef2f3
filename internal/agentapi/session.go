package agentapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Scope is what an Asker learns of the handler run that asks.
type Scope struct {
	// Message is the inbound message being handled (a copy).
	Message events.Inbound
	// Deadline is the handler's deadline; no wait may outlast it.
	Deadline time.Time
	// N numbers the question within the handler run, from 1, in call
	// order: a re-run of the handler asks its n-th question again.
	N int
}

// Asker asks a peer workspace and waits for its answer (issue 13 part C
// provides one). Ask must return by ctx's deadline.
type Asker interface {
	Ask(ctx context.Context, scope Scope, q handler.Question) (*handler.PeerAnswer, error)
}

// Session is one handler run's view of the agent API. It implements
// handler.Agent and handler.AgentEndpoint; every call is refused once the
// handler returned or its deadline passed.
type Session struct {
	srv      *Server
	token    string
	key      [sha256.Size]byte
	in       events.Inbound
	deadline time.Time

	// base carries the handler context's values for calls made over HTTP.
	base context.Context

	ended    atomic.Bool
	interims atomic.Int64
	asks     atomic.Int64
	// postMu keeps the session's interims in call order.
	postMu sync.Mutex
}

// Endpoint is the API's URL and this session's capability token.
func (s *Session) Endpoint() (string, string) { return s.srv.url, s.token }

func (s *Session) end() {
	s.ended.Store(true)
	s.srv.forget(s.key)
}

// scoped bounds ctx by the handler's deadline, or fails when the session
// is over.
func (s *Session) scoped(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.ended.Load() || !time.Now().Before(s.deadline) {
		return nil, nil, ErrSessionEnded
	}
	ctx, cancel := context.WithDeadline(ctx, s.deadline)
	return ctx, cancel, nil
}

// client is the platform client of the session's workspace.
func (s *Session) client() (*molecule.Client, error) {
	c := s.srv.cfg.Clients[s.in.WorkspaceID]
	if c == nil && s.srv.cfg.Lookup != nil {
		c = s.srv.cfg.Lookup(s.in.WorkspaceID)
	}
	if c == nil {
		return nil, fmt.Errorf("%w %s", ErrNoClient, s.in.WorkspaceID)
	}
	return c, nil
}

// Ask asks a peer through the configured Asker.
func (s *Session) Ask(ctx context.Context, q handler.Question) (*handler.PeerAnswer, error) {
	ctx, cancel, err := s.scoped(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if s.srv.cfg.Asker == nil {
		return nil, ErrNoAsker
	}
	if q.PeerID == "" || (q.Text == "" && len(q.Attachments) == 0) {
		return nil, fmt.Errorf("%w: a question needs peer_id and text or attachments", ErrBadRequest)
	}
	if q.Timeout > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, q.Timeout)
		defer c2()
	}
	n := int(s.asks.Add(1))
	return s.srv.cfg.Asker.Ask(ctx, Scope{Message: s.in, Deadline: s.deadline, N: n}, q)
}

// callContext is the context of a call made over HTTP: the handler
// context's values with the request's cancellation.
func (s *Session) callContext(req context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.base)
	stop := context.AfterFunc(req, cancel)
	return ctx, func() { stop(); cancel() }
}

// Peers lists the workspace's peers, reused for PeersTTL (the client
// keeps the list).
func (s *Session) Peers(ctx context.Context) ([]molecule.Peer, error) {
	ctx, cancel, err := s.scoped(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	return c.PeersCached(ctx, s.srv.cfg.PeersTTL)
}

// Discover resolves a workspace (the client caches it).
func (s *Session) Discover(ctx context.Context, id string) (*molecule.Discovery, error) {
	ctx, cancel, err := s.scoped(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if id == "" {
		return nil, fmt.Errorf("%w: discover needs a workspace id", ErrBadRequest)
	}
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	return c.Discover(ctx, id)
}

// Secrets reads the workspace's secrets when the operator allowed it.
func (s *Session) Secrets(ctx context.Context) (map[string]string, error) {
	ctx, cancel, err := s.scoped(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if !s.srv.cfg.Secrets {
		return nil, ErrSecretsOff
	}
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	return c.Secrets(ctx)
}
