package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Payload is the JSON the exec: and http: handlers send: on the program's
// stdin, or as the POST body. It is built from the inbound envelope only,
// so it never carries a platform token.
type Payload struct {
	// Message is the inbound envelope, including the original activity
	// row under "raw".
	Message *Message `json:"message"`
	// Delivery is the 1-based delivery count (> 1: an earlier attempt
	// failed or crashed).
	Delivery uint64 `json:"delivery"`
	// Deadline is when the handler must be done, if known.
	Deadline time.Time `json:"deadline,omitzero"`
	// AgentAPI is where the handler reaches the agent API for this
	// message (agentapi.go); absent when the relay serves none.
	AgentAPI *AgentAPIRef `json:"agent_api,omitempty"`
	// Conversation and History are Request.Conversation and
	// Request.History: the conversation's earlier turns, oldest first.
	Conversation string `json:"conversation,omitempty"`
	History      []Turn `json:"history,omitempty"`
	// Files are Request.Files: each attachment's local path, or why the
	// relay could not fetch it.
	Files []File `json:"files,omitempty"`
}

// NewPayload builds the Payload of req.
func NewPayload(req *Request) Payload {
	return Payload{Message: req.Message, Delivery: req.Delivery, Deadline: req.Deadline, AgentAPI: agentRef(req),
		Conversation: req.Conversation, History: req.History, Files: req.Files}
}

func marshalPayload(req *Request) ([]byte, error) {
	if req == nil || req.Message == nil {
		return nil, fmt.Errorf("%w: request without a message", ErrPermanent)
	}
	b, err := json.Marshal(NewPayload(req))
	if err != nil {
		return nil, fmt.Errorf("%w: encode message: %v", ErrPermanent, err)
	}
	return b, nil
}

// keepAlive calls req.Progress every interval until the returned stop is
// called.
func keepAlive(ctx context.Context, req *Request, interval time.Duration) (stop func()) {
	if req == nil || req.Progress == nil || interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				req.Progress()
			}
		}
	}()
	return func() { cancel(); <-done }
}

func loggerOf(req *Request) *slog.Logger {
	if req != nil && req.Logger != nil {
		return req.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// capBuffer keeps the first max bytes written to it and counts the rest,
// so a chatty program never blocks on a full pipe.
type capBuffer struct {
	max      int64
	buf      []byte
	overflow bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := b.max - int64(len(b.buf)); room > 0 {
		if int64(len(p)) > room {
			b.buf = append(b.buf, p[:room]...)
			b.overflow = true
		} else {
			b.buf = append(b.buf, p...)
		}
	} else if len(p) > 0 {
		b.overflow = true
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
	cut bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	if b.cut {
		return "…" + string(b.buf)
	}
	return string(b.buf)
}

// readCapped reads r up to max bytes; overflow reports that more followed.
func readCapped(r io.Reader, max int64) (data []byte, overflow bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, max+1))
	if int64(len(data)) > max {
		return data[:max], true, err
	}
	return data, false, err
}
