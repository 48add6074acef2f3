// Package handler is the dispatcher's unit of extension: a Handler turns an
// inbound message into reply text. Built-ins are chosen by one spec string
// ("echo", "exec:./agent.sh --flag", "http:https://…", "openai:https://…");
// a Go program passes its own Func.
package handler

// Handler, Request, Func and ErrPermanent are a fixed contract (agent.go
// adds memory, structured answers and the agent API to it); Parse and the
// built-ins live in parse.go, echo.go, exec.go, http.go and openai.go.

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Handler handles one inbound message. It returns the reply text, or "" for
// "no reply". A returned error is retried (the message is redelivered with
// backoff) unless it matches ErrPermanent.
type Handler interface {
	Handle(ctx context.Context, req *Request) (string, error)
}

// Func adapts a function to Handler.
type Func func(ctx context.Context, req *Request) (string, error)

// Handle calls f.
func (f Func) Handle(ctx context.Context, req *Request) (string, error) { return f(ctx, req) }

// ErrPermanent marks an error retrying cannot fix: wrap it
// (fmt.Errorf("%w: bad input", handler.ErrPermanent)) and the message goes
// straight to the dead-letter stream.
var ErrPermanent = errors.New("handler: permanent failure")

// Request is what a handler sees. It never carries a platform token.
type Request struct {
	// Message is the inbound envelope.
	Message *Message
	// Delivery is the 1-based delivery count; > 1 means an earlier attempt
	// failed or crashed mid-handler.
	Delivery uint64
	// Deadline is when the handler must be done (also ctx's deadline).
	Deadline time.Time
	// Logger is scoped to this message.
	Logger *slog.Logger
	// Progress tells the stage the handler is alive (keeps the message from
	// being redelivered). Safe to call from any goroutine; never nil.
	Progress func()
	// Conversation names the conversation the message belongs to (the
	// canvas user, a peer, or an A2A context); see agent.go.
	Conversation string
	// History is the conversation's recent turns, oldest first, not
	// including this message; empty when memory is off.
	History []Turn
	// Agent is the relay's agent API for this message, used through
	// Request's Interim, AskPeer, Peers, Discover and Secrets methods; nil
	// when the relay offers none.
	Agent Agent
	// Files are the message's attachments as the relay fetched them, one
	// per Message.Attachments entry in its order: a local path, or the
	// reason it could not be fetched. Empty when the relay fetches none.
	Files []File
}
