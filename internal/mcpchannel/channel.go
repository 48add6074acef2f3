// Package mcpchannel is the Claude Code channel: the mcp handler kind, an
// MCP stdio server that shows each inbound message to Claude Code as a
// notifications/claude/channel notification and takes the answer back
// through its tools, and the lease that keeps one instance per workspace.
//
// The handler runs inside the ordinary dispatcher, so a message counts as
// handled only when Claude answered or dismissed it: the dispatcher then
// stores the handled record and publishes the reply, and the replier posts
// it once. A message shown to a client that goes away is handed back to
// JetStream and shown again to the next client.
package mcpchannel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Errors of the mcp handler; each is retryable (the message is shown again
// later), none is handler.ErrPermanent.
var (
	// ErrNoClient: no initialized MCP client is connected.
	ErrNoClient = errors.New("mcpchannel: no Claude Code client connected")
	// ErrClientGone: the client went away before it answered.
	ErrClientGone = errors.New("mcpchannel: Claude Code client disconnected before answering")
	// ErrNotAnswered: neither answered nor dismissed within the answer timeout.
	ErrNotAnswered = errors.New("mcpchannel: message not answered in time")
	// ErrAlreadyPending: another delivery of the same message is waiting.
	ErrAlreadyPending = errors.New("mcpchannel: message already waiting for an answer")
)

// Channel is the mcp handler: it implements handler.Answerer. Messages are
// shown to the connected client and wait until a tool answers them. It is
// safe for concurrent use.
type Channel struct {
	log   *slog.Logger
	names *peerDirectory // nil: no peer names beyond the envelope's

	mu      sync.Mutex
	client  *client
	pending map[string]*pending // by activity id
	seq     uint64
	perms   map[string]PermissionRequest // open permission prompts, by request id
	// arrived is closed when a message starts waiting (pull.go).
	arrived chan struct{}
}

// client is one connected, initialized MCP client.
type client struct {
	notify     func(context.Context, Notification) error
	permission func(ctx context.Context, requestID, behavior string) error
	gone       chan struct{}
}

// pending is a message shown to the client and waiting for its answer.
type pending struct {
	req    *handler.Request
	seq    uint64
	answer chan handler.Answer // buffered: the one answer
	done   chan struct{}       // closed when the handler returned
	// answered is set, under Channel.mu, when a tool took the message.
	answered bool
	// delivered reports whether the handler returned the answer (valid
	// once done is closed).
	delivered bool
}

// NewChannel returns a Channel with no client.
func NewChannel(log *slog.Logger) *Channel {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Channel{log: log, pending: map[string]*pending{}}
}

// Handle implements handler.Handler: the answer's text, "" when dismissed.
func (c *Channel) Handle(ctx context.Context, req *handler.Request) (string, error) {
	a, err := c.Answer(ctx, req)
	if err != nil || a.NoReply {
		return "", err
	}
	return a.Text, nil
}

// Answer implements handler.Answerer: it shows req to the client and waits
// for a tool to answer or dismiss it, keeping the message alive meanwhile.
func (c *Channel) Answer(ctx context.Context, req *handler.Request) (handler.Answer, error) {
	if req == nil || req.Message == nil {
		return handler.Answer{}, fmt.Errorf("%w: request without a message", handler.ErrPermanent)
	}
	if a, ok, err := c.verdict(ctx, req.Message); ok {
		return a, err
	}
	p, cl, err := c.open(req)
	if err != nil {
		return handler.Answer{}, err
	}
	defer c.finish(p)
	if err := cl.notify(ctx, NewNotificationWithFiles(c.names.enrich(ctx, req.Message), req.Files)); err != nil {
		return handler.Answer{}, fmt.Errorf("%w: notification not sent: %v", ErrClientGone, err)
	}
	// The stage keeps the message alive while this waits (stage.KeepAlive).
	select {
	case a := <-p.answer:
		p.delivered = true
		return a, nil
	case <-cl.gone:
		return c.lastChance(p, ErrClientGone)
	case <-ctx.Done():
		return c.lastChance(p, fmt.Errorf("%w (%v)", ErrNotAnswered, ctx.Err()))
	}
}

// lastChance prefers an answer that arrived together with the end of the
// wait over the error.
func (c *Channel) lastChance(p *pending, err error) (handler.Answer, error) {
	select {
	case a := <-p.answer:
		p.delivered = true
		return a, nil
	default:
		return handler.Answer{}, err
	}
}

func (c *Channel) open(req *handler.Request) (*pending, *client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		return nil, nil, ErrNoClient
	}
	id := req.Message.ActivityID
	if _, ok := c.pending[id]; ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrAlreadyPending, id)
	}
	c.seq++
	p := &pending{req: req, seq: c.seq, answer: make(chan handler.Answer, 1), done: make(chan struct{})}
	c.pending[id] = p
	c.signalArrival()
	return p, c.client, nil
}

func (c *Channel) finish(p *pending) {
	c.mu.Lock()
	if c.pending[p.req.Message.ActivityID] == p {
		delete(c.pending, p.req.Message.ActivityID)
	}
	c.mu.Unlock()
	close(p.done)
}

// connect makes notify the client messages are shown to; it returns the
// function that disconnects it, after which every waiting message fails
// with ErrClientGone (and goes back to JetStream).
func (c *Channel) connect(notify func(context.Context, Notification) error, permission func(context.Context, string, string) error) (disconnect func()) {
	cl := &client{notify: notify, permission: permission, gone: make(chan struct{})}
	c.mu.Lock()
	c.client = cl
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.client == cl {
			c.client = nil
			c.perms = nil // the client's prompts closed with it
		}
		c.mu.Unlock()
		close(cl.gone)
	}
}

// selector picks the waiting message a tool call is about.
type selector struct {
	ActivityID  string
	WorkspaceID string
	// PeerID: a peer's message; "" with Canvas: a canvas message.
	PeerID string
	Canvas bool
}

// find returns the waiting message sel names: by activity id, else the
// oldest waiting message of that sender (peer, or canvas) in that
// workspace (any, when not given).
func (c *Channel) find(sel selector) (*pending, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sel.ActivityID != "" {
		p, ok := c.pending[sel.ActivityID]
		if !ok {
			return nil, fmt.Errorf("no message %s is waiting for an answer (already answered or dismissed, or not shown in this session)", sel.ActivityID)
		}
		if err := sel.matches(p.req.Message); err != nil {
			return nil, err
		}
		return p, nil
	}
	var all []*pending
	for _, p := range c.pending {
		if sel.matches(p.req.Message) == nil {
			all = append(all, p)
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no message from %s is waiting for an answer (%d waiting in all)", sel.sender(), len(c.pending))
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	return all[0], nil
}

func (s selector) sender() string {
	if s.PeerID != "" {
		return "peer " + s.PeerID
	}
	if s.Canvas {
		return "the canvas user"
	}
	return "anyone"
}

func (s selector) matches(in *events.Inbound) error {
	if s.WorkspaceID != "" && in.WorkspaceID != s.WorkspaceID {
		return fmt.Errorf("message %s was sent to workspace %s, not %s", in.ActivityID, in.WorkspaceID, s.WorkspaceID)
	}
	peer := in.Source == events.SourcePeerAgent
	switch {
	case s.PeerID != "" && (!peer || in.SourceWorkspaceID != s.PeerID):
		return fmt.Errorf("message %s is not from peer %s (kind %s); reply without peer_id or with its own peer_id", in.ActivityID, s.PeerID, in.Source)
	case s.Canvas && peer:
		return fmt.Errorf("message %s is from peer %s: pass its peer_id", in.ActivityID, in.SourceWorkspaceID)
	}
	return nil
}

// take hands a to the waiting message p, once; it fails if another tool
// call took it first or its handler already gave up.
func (c *Channel) take(p *pending, a handler.Answer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.answered {
		return fmt.Errorf("message %s was already answered or dismissed", p.req.Message.ActivityID)
	}
	select {
	case <-p.done:
		return fmt.Errorf("message %s is no longer waiting (the session lost it; it will be shown again)", p.req.Message.ActivityID)
	default:
	}
	p.answered = true
	p.answer <- a
	return nil
}

// waitHandled waits until p's handler returned; it reports whether the
// handler returned the answer the tool gave it.
func waitHandled(ctx context.Context, p *pending) (bool, error) {
	select {
	case <-p.done:
		return p.delivered, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Waiting is the number of messages shown and not yet answered.
func (c *Channel) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}
