package stage

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The raw form of a stage's work, for the tests of the Runner itself: a
// process that finishes its delivery by hand with the Runner's appliers
// below, as the stages did before they returned an Outcome.

type (
	Process    = process
	Middleware = middleware
)

func Chain(p Process, mw ...Middleware) Process { return chain(p, mw...) }

// New is Open of a raw Process with cfg by value.
func New(js jetstream.JetStream, target Target, cfg Config, ackWait time.Duration, maxDeliver int, admit Admission, p Process) (*Runner, error) {
	return open(js, target, &cfg, ackWait, maxDeliver, admit, p)
}

func (r *Runner) Retry(d *Delivery, atLeast time.Duration) {
	r.finish(context.Background(), d, Retry(atLeast))
}

func (r *Runner) Defer(d *Delivery, delay time.Duration) {
	r.finish(context.Background(), d, Defer(delay))
}

func (r *Runner) Ack(runCtx context.Context, d *Delivery, log *slog.Logger, lost string) {
	d.Log = log
	r.finish(runCtx, d, Ack(lost))
}

func (r *Runner) DeadLetter(runCtx context.Context, d *Delivery, reason string, cause error) {
	r.finish(runCtx, d, DeadLetter(reason, cause))
}
