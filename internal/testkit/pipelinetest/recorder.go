package pipelinetest

import (
	"context"
	"sync"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// Call is one handler invocation a Recorder saw.
type Call struct {
	ActivityID string
	Text       string
	Delivery   uint64
	// Completed is true when the handler returned without an error.
	Completed bool
	// Err is the error the handler returned, if any.
	Err error
}

// Recorder is a handler.Handler that records every invocation and its
// outcome, then delegates. It is safe for concurrent use.
type Recorder struct {
	next handler.Handler

	mu    sync.Mutex
	calls []*Call
}

// NewRecorder wraps next; nil means handler.Echo ("echo: <text>").
func NewRecorder(next handler.Handler) *Recorder {
	if next == nil {
		next = handler.Echo
	}
	return &Recorder{next: next}
}

// Handle records the call, runs the wrapped handler and records its
// outcome.
func (r *Recorder) Handle(ctx context.Context, req *handler.Request) (string, error) {
	c := &Call{ActivityID: req.Message.ActivityID, Text: req.Message.Text, Delivery: req.Delivery}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	text, err := r.next.Handle(ctx, req)
	r.mu.Lock()
	c.Completed, c.Err = err == nil, err
	r.mu.Unlock()
	return text, err
}

// Calls returns a copy of every call so far, in start order.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Call, len(r.calls))
	for i, c := range r.calls {
		out[i] = *c
	}
	return out
}

// Started is the number of handler invocations so far.
func (r *Recorder) Started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// Completions is the number of invocations that returned without error.
func (r *Recorder) Completions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Completed {
			n++
		}
	}
	return n
}

// Deliveries returns the delivery counts the handler saw for one
// activity, in start order.
func (r *Recorder) Deliveries(activityID string) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, c := range r.calls {
		if c.ActivityID == activityID {
			out = append(out, c.Delivery)
		}
	}
	return out
}

// CompletionsByActivity counts completed invocations per activity id.
func (r *Recorder) CompletionsByActivity() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, c := range r.calls {
		if c.Completed {
			out[c.ActivityID]++
		}
	}
	return out
}
