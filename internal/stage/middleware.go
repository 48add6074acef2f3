package stage

import "context"

// counting counts every delivery taken from the queue.
func (r *Runner) counting(next process) process {
	return func(ctx context.Context, d *Delivery) {
		r.stats.received.Add(1)
		r.stats.inFlight.Add(1)
		defer r.stats.inFlight.Add(-1)
		next(ctx, d)
	}
}

// withMetadata reads the delivery's JetStream metadata; a message without
// any is not a JetStream message, with nothing to redeliver or record: it
// is terminated.
func (r *Runner) withMetadata(next process) process {
	return func(ctx context.Context, d *Delivery) {
		meta, err := d.Msg.Metadata()
		if err != nil {
			r.log.ErrorContext(ctx, r.target.Stage+": message without JetStream metadata", "subject", d.Msg.Subject(), "error", err)
			_ = d.Msg.Term()
			return
		}
		d.Meta = meta
		next(ctx, d)
	}
}

// keepingAlive keeps the message the stage's until its work returned,
// the writes after the work included (KeepAlive every ProgressInterval).
func (r *Runner) keepingAlive(next process) process {
	return func(ctx context.Context, d *Delivery) {
		// The state lives in the Delivery: no allocation of its own, and
		// no closure for stop.
		d.keep.start(d.Msg, r.cfg.ProgressInterval)
		defer d.keep.stop()
		d.Progress = d.keep.progress
		next(ctx, d)
	}
}

// Step is a stage's work on one message m and says how it is to be
// finished. M is the raw *Delivery for the step the Runner calls, or a
// stage's own decoded form of it for the steps behind its decoding.
//
// ctx is the run's context: it ends when the run is stopped, and work in
// flight should then still finish (see Runner.OpContext).
type Step[M any] func(ctx context.Context, m M) Outcome

// Wrap is one middleware of a stage: a cross-cutting step (tracing,
// de-duplication, admission, ...) that either returns an outcome of its
// own or calls next.
type Wrap[M any] func(next Step[M]) Step[M]

// Steps puts step behind wraps, the first one outermost: a stage's
// middleware, declared once as one list that reads in the order a message
// meets it.
func Steps[M any](step Step[M], wraps ...Wrap[M]) Step[M] {
	for i := len(wraps) - 1; i >= 0; i-- {
		step = wraps[i](step)
	}
	return step
}
