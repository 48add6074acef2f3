package handler

// What a handler can be besides a text function: it sees the recent turns
// of its conversation (Request.History), may answer with attachments or
// decline to reply (Answerer), and may act as an agent while it runs
// (Request.Interim, AskPeer, Peers, Discover, Secrets), all without ever
// holding the workspace token: the relay does the platform calls for it.

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Turn roles.
const (
	// RoleUser is a turn of the other party: the canvas user, or the peer.
	RoleUser = "user"
	// RoleAgent is a turn this agent sent: a reply the relay posted.
	RoleAgent = "agent"
)

// Turn is one earlier turn of the conversation a message belongs to,
// oldest first in Request.History.
type Turn struct {
	Role        string       `json:"role"`
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// ActivityID is the inbound activity the turn belongs to (a user turn
	// and the agent's reply to it share it).
	ActivityID string    `json:"activity_id,omitempty"`
	At         time.Time `json:"at,omitzero"`
}

// Answer is a handler's full answer. The zero value means "no reply".
type Answer struct {
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// NoReply, when true, sends nothing even if Text is set (the JSON
	// form is "reply": false).
	NoReply bool `json:"-"`
}

// Empty says whether the answer sends nothing.
func (a Answer) Empty() bool { return a.NoReply || (a.Text == "" && len(a.Attachments) == 0) }

// Answerer is a Handler that can answer with more than text. The
// dispatcher calls Answer instead of Handle when a handler implements it.
type Answerer interface {
	Handler
	Answer(ctx context.Context, req *Request) (Answer, error)
}

// AnswerOf runs h on req: through Answer when h is an Answerer, else
// through Handle, its text becoming the answer.
func AnswerOf(ctx context.Context, h Handler, req *Request) (Answer, error) {
	if a, ok := h.(Answerer); ok {
		return a.Answer(ctx, req)
	}
	text, err := h.Handle(ctx, req)
	return Answer{Text: text}, err
}

// Agent is what the relay does for a handler while it runs, on behalf of
// the message it handles. The dispatcher sets Request.Agent; every call is
// scoped to that message and refused once it is finished.
type Agent interface {
	// Interim posts a message to the conversation now (the canvas user or
	// the peer that sent the message), before the final answer.
	Interim(ctx context.Context, m Interim) error
	// Ask sends a question to a peer workspace and waits for its answer.
	Ask(ctx context.Context, q Question) (*PeerAnswer, error)
	// Peers lists the workspaces this one may talk to.
	Peers(ctx context.Context) ([]molecule.Peer, error)
	// Discover resolves one workspace.
	Discover(ctx context.Context, id string) (*molecule.Discovery, error)
	// Secrets reads the workspace's secrets; refused unless the operator
	// turned it on.
	Secrets(ctx context.Context) (map[string]string, error)
	// File opens one of the message's attachments by its URI and returns
	// its body (close it) and content type; any other URI is refused.
	File(ctx context.Context, uri string) (io.ReadCloser, string, error)
}

// Interim is a message sent to the conversation before the final answer.
type Interim struct {
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Question is an A2A message to a peer, awaited.
type Question struct {
	// PeerID is the workspace asked.
	PeerID      string       `json:"peer_id"`
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// Timeout bounds the wait; if not set, the relay's default. It never
	// outlasts the handler's own deadline.
	Timeout time.Duration `json:"-"`
}

// PeerAnswer is a peer's answer to a Question.
type PeerAnswer struct {
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// MessageID is the messageId the question was sent with.
	MessageID string `json:"message_id"`
	// ActivityID is the answer's activity on this workspace's feed (empty
	// when a push-mode peer answered in the HTTP response).
	ActivityID string `json:"activity_id,omitempty"`
}

// ErrNoAgent is returned by Request's agent methods when the relay runs the
// handler without the agent API (a test, or a caller that set no Agent).
var ErrNoAgent = errors.New("handler: no agent API for this request")

// Interim posts text to the conversation now; see Agent.Interim.
func (r *Request) Interim(ctx context.Context, text string, attachments ...Attachment) error {
	if r.Agent == nil {
		return ErrNoAgent
	}
	return r.Agent.Interim(ctx, Interim{Text: text, Attachments: attachments})
}

// AskPeer asks a peer and waits for its answer; see Agent.Ask.
func (r *Request) AskPeer(ctx context.Context, q Question) (*PeerAnswer, error) {
	if r.Agent == nil {
		return nil, ErrNoAgent
	}
	return r.Agent.Ask(ctx, q)
}

// Peers lists the workspace's peers; see Agent.Peers.
func (r *Request) Peers(ctx context.Context) ([]molecule.Peer, error) {
	if r.Agent == nil {
		return nil, ErrNoAgent
	}
	return r.Agent.Peers(ctx)
}

// Discover resolves a workspace; see Agent.Discover.
func (r *Request) Discover(ctx context.Context, id string) (*molecule.Discovery, error) {
	if r.Agent == nil {
		return nil, ErrNoAgent
	}
	return r.Agent.Discover(ctx, id)
}

// Secrets reads the workspace's secrets; see Agent.Secrets.
func (r *Request) Secrets(ctx context.Context) (map[string]string, error) {
	if r.Agent == nil {
		return nil, ErrNoAgent
	}
	return r.Agent.Secrets(ctx)
}

// File opens one of the message's attachments; see Agent.File.
func (r *Request) File(ctx context.Context, uri string) (io.ReadCloser, string, error) {
	if r.Agent == nil {
		return nil, "", ErrNoAgent
	}
	return r.Agent.File(ctx, uri)
}
