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
			r.log.Error(r.target.Stage+": message without JetStream metadata", "subject", d.Msg.Subject(), "error", err)
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
