package relay

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Handler answers one message. It returns the answer (the zero Answer
// sends nothing), or an error: the message is then redelivered with
// backoff, unless the error matches ErrPermanent (it goes to the
// dead-letter stream at once). c is the message's context: it ends at the
// handler's deadline or when the relay stops, and gives the handler the
// relay's agent API for this message.
type Handler func(c *Context, m *Message) (Answer, error)

// ErrPermanent marks a handler error retrying cannot fix: wrap it
// (fmt.Errorf("%w: bad input", relay.ErrPermanent)).
var ErrPermanent = handler.ErrPermanent

// Source is who sent a message.
type Source string

const (
	// FromCanvasUser is a person on the canvas, or the platform's scheduler
	// (Message.Cron).
	FromCanvasUser Source = Source(events.SourceCanvasUser)
	// FromPeer is another workspace's agent (Message.SourceWorkspaceID).
	FromPeer Source = Source(events.SourcePeerAgent)
	// FromSelf is this workspace (only with MOLECULE_ALLOW_SELF).
	FromSelf Source = Source(events.SourceSelf)
)

// Message is the inbound message a handler answers, with what the relay
// knows about its conversation. It never carries a platform token.
type Message struct {
	WorkspaceID string
	// ActivityID is the platform's activity row of the message.
	ActivityID string
	Source     Source
	// SourceWorkspaceID is the sending workspace of a peer's message.
	SourceWorkspaceID string
	// PeerName and PeerRole describe the peer when the platform says.
	PeerName, PeerRole string
	Text               string
	Attachments        []Attachment
	// Cron is true for a message the platform's scheduler sent.
	Cron bool
	// MessageID, ContextID and TaskID are the A2A ids of the message.
	MessageID, ContextID, TaskID string
	// CreatedAt is when the platform queued the message.
	CreatedAt time.Time
	// Delivery is the 1-based delivery count: > 1 means an earlier
	// attempt failed or stopped mid-handler.
	Delivery uint64
	// Conversation names the conversation (the canvas user, a peer, an
	// A2A context); History is its recent turns, oldest first, without
	// this message: the relay's memory (empty when MOLECULE_MEMORY is off).
	Conversation string
	History      []Turn
	// Files are the attachments as the relay fetched them, one per
	// Attachments entry in its order.
	Files []File
	// Raw is the activity row as the platform returned it.
	Raw json.RawMessage
}

// Attachment is a file attached to a message, an answer, an interim
// message or a question.
type Attachment struct {
	URI      string
	Name     string
	MimeType string
	Size     int64
}

// Turn is one earlier turn of a conversation.
type Turn struct {
	// Agent is true for a turn this agent sent, false for the other
	// party's (the canvas user or the peer).
	Agent       bool
	Text        string
	Attachments []Attachment
	ActivityID  string
	At          time.Time
}

// File is one of the message's attachments as the relay holds it: Path,
// a local copy (read it, do not move it: a redelivery needs it), or
// Error, why there is none.
type File struct {
	URI, Name, MimeType string
	Size                int64
	Path, SHA256        string
	Error               string
}

// Answer is a handler's answer. The zero value sends nothing.
type Answer struct {
	Text string
	// Attachments are sent with the text. A local file (its URI a path,
	// file:///… or /…) is uploaded first, for a canvas user only: a peer
	// cannot read this workspace's uploads (attach an https URL).
	Attachments []Attachment
}

// Question is a message to a peer whose answer the handler waits for.
type Question struct {
	PeerID      string
	Text        string
	Attachments []Attachment
	// Timeout bounds the wait (0: MOLECULE_ASK_TIMEOUT); never beyond the
	// handler's deadline.
	Timeout time.Duration
}

// PeerAnswer is a peer's answer to a Question.
type PeerAnswer struct {
	Text        string
	Attachments []Attachment
	// MessageID is the messageId the question was sent with.
	MessageID string
}

// ErrNoAnswer is returned by Context.Ask when the peer did not answer in
// time.
var ErrNoAnswer = delegate.ErrNoAnswer

// Context is a handler's context.Context for one message, and the
// relay's agent API on the message's behalf: every call is scoped to the
// message and refused once the handler has returned. The relay makes the
// platform calls; the handler never holds the workspace token.
type Context struct {
	context.Context
	req *handler.Request
}

// Logger is scoped to this message.
func (c *Context) Logger() *slog.Logger { return c.req.Logger }

// Progress tells the relay the handler is alive, so a long run is not
// redelivered. Safe from any goroutine.
func (c *Context) Progress() { c.req.Progress() }

// Interim posts a message to the conversation now, before the answer.
func (c *Context) Interim(text string, attachments ...Attachment) error {
	return c.req.Interim(c, text, toEvents(attachments)...)
}

// Ask sends q to a peer and waits for its answer (delegation); a re-run
// of the message after a crash finds the answer instead of asking again.
func (c *Context) Ask(q Question) (*PeerAnswer, error) {
	a, err := c.req.AskPeer(c, handler.Question{PeerID: q.PeerID, Text: q.Text, Attachments: toEvents(q.Attachments), Timeout: q.Timeout})
	if err != nil {
		return nil, err
	}
	return &PeerAnswer{Text: a.Text, Attachments: fromEvents(a.Attachments), MessageID: a.MessageID}, nil
}

// Peers lists the workspaces this one may talk to.
func (c *Context) Peers() ([]molecule.Peer, error) { return c.req.Peers(c) }

// Discover resolves one workspace.
func (c *Context) Discover(id string) (*molecule.Discovery, error) { return c.req.Discover(c, id) }

// Secrets reads the workspace's secrets; refused unless the operator
// allowed it (MOLECULE_AGENT_API_SECRETS).
func (c *Context) Secrets() (map[string]string, error) { return c.req.Secrets(c) }

// OpenFile opens one of the message's attachments by its URI and returns
// its body (close it) and content type; any other URI is refused.
func (c *Context) OpenFile(uri string) (io.ReadCloser, string, error) { return c.req.File(c, uri) }

// asHandler adapts h to the dispatcher's handler.
func asHandler(h Handler) handler.Handler { return goHandler(h) }

type goHandler Handler

func (h goHandler) Handle(ctx context.Context, req *handler.Request) (string, error) {
	a, err := h.Answer(ctx, req)
	return a.Text, err
}

func (h goHandler) Answer(ctx context.Context, req *handler.Request) (handler.Answer, error) {
	a, err := h(&Context{Context: ctx, req: req}, newMessage(req))
	return handler.Answer{Text: a.Text, Attachments: toEvents(a.Attachments)}, err
}

func newMessage(req *handler.Request) *Message {
	in := req.Message
	m := &Message{
		WorkspaceID: in.WorkspaceID, ActivityID: in.ActivityID, Source: Source(in.Source), SourceWorkspaceID: in.SourceWorkspaceID,
		PeerName: in.PeerName, PeerRole: in.PeerRole, Text: in.Text, Attachments: fromEvents(in.Attachments), Cron: in.Cron,
		MessageID: in.MessageID, ContextID: in.ContextID, TaskID: in.TaskID, CreatedAt: in.CreatedAt,
		Delivery: req.Delivery, Conversation: req.Conversation, Raw: in.Raw,
	}
	for _, t := range req.History {
		m.History = append(m.History, Turn{Agent: t.Role == handler.RoleAgent, Text: t.Text, Attachments: fromEvents(t.Attachments), ActivityID: t.ActivityID, At: t.At})
	}
	for _, f := range req.Files {
		m.Files = append(m.Files, File(f))
	}
	return m
}

func toEvents(in []Attachment) []events.Attachment {
	if len(in) == 0 {
		return nil
	}
	out := make([]events.Attachment, len(in))
	for i, a := range in {
		out[i] = events.Attachment(a)
	}
	return out
}

func fromEvents(in []events.Attachment) []Attachment {
	if len(in) == 0 {
		return nil
	}
	out := make([]Attachment, len(in))
	for i, a := range in {
		out[i] = Attachment(a)
	}
	return out
}
