package stage

import (
	"sync/atomic"
	"time"
)

// Stats counts what every stage does with its deliveries. A stage's own
// Stats embeds it.
type Stats struct {
	// Received counts messages taken from the queue.
	Received uint64
	// Retried counts messages nak'd with a delay for redelivery.
	Retried uint64
	// Deferred counts messages handed back because the context's deadline
	// left no room for them (start-margin rule).
	Deferred uint64
	// DeadLettered counts dead letters published; each is followed by a
	// Term, counted in Terminated.
	DeadLettered uint64
	Terminated   uint64
}

// Sub returns s - prev, counter by counter.
func (s Stats) Sub(prev Stats) Stats {
	return Stats{
		Received:     s.Received - prev.Received,
		Retried:      s.Retried - prev.Retried,
		Deferred:     s.Deferred - prev.Deferred,
		DeadLettered: s.DeadLettered - prev.DeadLettered,
		Terminated:   s.Terminated - prev.Terminated,
	}
}

type counters struct {
	received, retried, deferred, deadLettered, terminated atomic.Uint64
	inFlight                                              atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Received:     c.received.Load(),
		Retried:      c.retried.Load(),
		Deferred:     c.deferred.Load(),
		DeadLettered: c.deadLettered.Load(),
		Terminated:   c.terminated.Load(),
	}
}

// Durations accumulates how long something took: how often, in total and
// the longest. Safe for concurrent use; the zero value is ready.
type Durations struct {
	n          atomic.Uint64
	total, max atomic.Int64
}

// Observe adds one duration.
func (d *Durations) Observe(x time.Duration) {
	d.n.Add(1)
	d.total.Add(int64(x))
	for {
		cur := d.max.Load()
		if int64(x) <= cur || d.max.CompareAndSwap(cur, int64(x)) {
			return
		}
	}
}

// Load returns the count, the total and the longest so far.
func (d *Durations) Load() (n uint64, total, longest time.Duration) {
	return d.n.Load(), time.Duration(d.total.Load()), time.Duration(d.max.Load())
}
