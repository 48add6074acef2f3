// Package crashpoint lets a test stop a stage at a named point of its work
// as if its process had died there. The hooks travel in the context a test
// hands to the stage's Run or Drain, never in a production config: a stage
// asks Hit at each point, and with no hooks in its context nothing happens.
//
// A hook that returns a non-nil error makes the stage abandon the message
// right there — no further record, publish, post, ack or nak; the test then
// closes the NATS connection and cancels the context to stop the stage for
// real.
package crashpoint

import (
	"context"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Dispatcher holds the dispatcher's crash points, those of its handler
// run and those of the reply its stage runner delivers (stage.Deliver).
type Dispatcher struct {
	// AfterHandler runs after the handler returned, before anything is
	// recorded.
	AfterHandler func(ctx context.Context, m *events.Inbound) error
	// AfterRecord runs after the handled record was stored, before the
	// reply is published.
	AfterRecord func(ctx context.Context, m *events.Inbound) error
	// AfterReplyPublish runs after the reply publish was acknowledged (or
	// there was no reply), before the inbound message is acked. A reply
	// posted directly is not published: this point is not reached.
	AfterReplyPublish func(ctx context.Context, m *events.Inbound) error
	// AfterDirectPost runs after a direct post returned without posting
	// the reply (it is to be published, or the message retried), before
	// the publish.
	AfterDirectPost func(ctx context.Context, m *events.Inbound) error
	// AfterRefusalRecord runs after the handled record recorded that the
	// platform refused the direct post for good, before its dead letter
	// is written.
	AfterRefusalRecord func(ctx context.Context, m *events.Inbound) error
	// AfterRefusalDeadLetter runs after the dead letter of a refused
	// direct post was written, before the inbound message is acked.
	AfterRefusalDeadLetter func(ctx context.Context, m *events.Inbound) error
	// Direct are the replier's points on the dispatcher's direct post (a
	// replier in the same process posting the reply in the inbound
	// message's slot for the dispatcher's runner, after AfterRecord): BeforePost after the posting record (for
	// a canvas reply, the handled record's posting mark), AfterPost after
	// the POST, AfterSent after the sent record, before the inbound
	// message is acked.
	Direct Replier
}

// Replier holds the replier's crash points.
type Replier struct {
	// BeforePost runs after the "posting" record was written, before the
	// POST is sent.
	BeforePost func(ctx context.Context, r *events.Reply) error
	// AfterPost runs after the platform accepted the POST, before the
	// record says "sent".
	AfterPost func(ctx context.Context, r *events.Reply) error
	// AfterSent runs after the record says "sent", before the ack.
	AfterSent func(ctx context.Context, r *events.Reply) error
}

type dispatcherKey struct{}
type replierKey struct{}

var none = struct {
	d Dispatcher
	r Replier
}{}

// WithDispatcher returns ctx carrying the dispatcher's crash points h.
func WithDispatcher(ctx context.Context, h *Dispatcher) context.Context {
	return context.WithValue(ctx, dispatcherKey{}, h)
}

// WithReplier returns ctx carrying the replier's crash points h.
func WithReplier(ctx context.Context, h *Replier) context.Context {
	return context.WithValue(ctx, replierKey{}, h)
}

// DispatcherOf returns the dispatcher's crash points in ctx; none set when
// ctx carries none.
func DispatcherOf(ctx context.Context) *Dispatcher {
	if h, ok := ctx.Value(dispatcherKey{}).(*Dispatcher); ok && h != nil {
		return h
	}
	return &none.d
}

// ReplierOf returns the replier's crash points in ctx; none set when ctx
// carries none.
func ReplierOf(ctx context.Context) *Replier {
	if h, ok := ctx.Value(replierKey{}).(*Replier); ok && h != nil {
		return h
	}
	return &none.r
}

// Direct returns ctx with the dispatcher's Direct points (none set when
// ctx carries none) as the replier's: the replier's code, run by the
// dispatcher's direct post, stops at them.
func Direct(ctx context.Context) context.Context {
	h := DispatcherOf(ctx)
	if h == &none.d {
		return ctx
	}
	return WithReplier(ctx, &h.Direct)
}

// Hit runs hook with v when it is set, and says whether the stage must
// abandon its message there (the hook returned an error).
func Hit[T any](ctx context.Context, hook func(context.Context, T) error, v T) bool {
	return hook != nil && hook(ctx, v) != nil
}

// RunDispatcher returns run (a dispatcher's Run or Drain) with h in its
// context.
func RunDispatcher(run func(context.Context) error, h *Dispatcher) func(context.Context) error {
	return func(ctx context.Context) error { return run(WithDispatcher(ctx, h)) }
}

// RunReplier returns run (a replier's Run) with h in its context.
func RunReplier(run func(context.Context) error, h *Replier) func(context.Context) error {
	return func(ctx context.Context) error { return run(WithReplier(ctx, h)) }
}
