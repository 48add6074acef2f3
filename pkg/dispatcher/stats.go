package dispatcher

import (
	"sync/atomic"
	"time"
)

// Stats counts what a Dispatcher did. Stats() returns the totals since New;
// Drain returns the counts of that drain alone.
type Stats struct {
	// Received counts messages taken from the queue.
	Received uint64
	// Handled counts handler runs that succeeded and were recorded.
	Handled uint64
	// Replied, NoReply and Skipped split Handled: a reply was published,
	// the handler answered "" (no reply), or the loop guard dropped the
	// reply (the message was itself a reply, or reached MaxHops).
	Replied uint64
	NoReply uint64
	Skipped uint64
	// Duplicates counts redeliveries of messages already handled (a lost
	// ack, or another worker finished first): the handler did not run
	// again; the recorded reply was republished.
	Duplicates uint64
	// PeerDuplicates counts peer messages whose sender's messageId an
	// earlier activity row already carried (a sender that posted twice):
	// acked, the handler not run.
	PeerDuplicates uint64
	// HandlerErrors counts handler runs that returned an error (or
	// panicked).
	HandlerErrors uint64
	// Retried counts messages nak'd with a delay for redelivery.
	Retried uint64
	// Deferred counts messages handed back because the context's deadline
	// left no room for a handler run (start-margin rule).
	Deferred uint64
	// DeadLettered counts dead letters this dispatcher published; each is
	// followed by a Term, counted in Terminated.
	DeadLettered uint64
	Terminated   uint64
	// HandlerRuns, HandlerTime and HandlerMax describe handler latency:
	// mean = HandlerTime / HandlerRuns.
	HandlerRuns uint64
	HandlerTime time.Duration
	HandlerMax  time.Duration
}

// MeanHandlerTime is HandlerTime / HandlerRuns (0 with no runs).
func (s Stats) MeanHandlerTime() time.Duration {
	if s.HandlerRuns == 0 {
		return 0
	}
	return s.HandlerTime / time.Duration(s.HandlerRuns)
}

// sub returns s - prev, counter by counter (HandlerMax is kept as is).
func (s Stats) sub(prev Stats) Stats {
	return Stats{
		Received:       s.Received - prev.Received,
		Handled:        s.Handled - prev.Handled,
		Replied:        s.Replied - prev.Replied,
		NoReply:        s.NoReply - prev.NoReply,
		Skipped:        s.Skipped - prev.Skipped,
		Duplicates:     s.Duplicates - prev.Duplicates,
		PeerDuplicates: s.PeerDuplicates - prev.PeerDuplicates,
		HandlerErrors:  s.HandlerErrors - prev.HandlerErrors,
		Retried:        s.Retried - prev.Retried,
		Deferred:       s.Deferred - prev.Deferred,
		DeadLettered:   s.DeadLettered - prev.DeadLettered,
		Terminated:     s.Terminated - prev.Terminated,
		HandlerRuns:    s.HandlerRuns - prev.HandlerRuns,
		HandlerTime:    s.HandlerTime - prev.HandlerTime,
		HandlerMax:     s.HandlerMax,
	}
}

type counters struct {
	received, handled, replied, noReply, skipped, duplicates   atomic.Uint64
	handlerErrors, retried, deferred, deadLettered, terminated atomic.Uint64
	handlerRuns, peerDuplicates                                atomic.Uint64
	handlerNanos, handlerMax                                   atomic.Int64
}

func (c *counters) observe(d time.Duration) {
	c.handlerRuns.Add(1)
	c.handlerNanos.Add(int64(d))
	for {
		cur := c.handlerMax.Load()
		if int64(d) <= cur || c.handlerMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

func (c *counters) snapshot() Stats {
	return Stats{
		Received:       c.received.Load(),
		Handled:        c.handled.Load(),
		Replied:        c.replied.Load(),
		NoReply:        c.noReply.Load(),
		Skipped:        c.skipped.Load(),
		Duplicates:     c.duplicates.Load(),
		PeerDuplicates: c.peerDuplicates.Load(),
		HandlerErrors:  c.handlerErrors.Load(),
		Retried:        c.retried.Load(),
		Deferred:       c.deferred.Load(),
		DeadLettered:   c.deadLettered.Load(),
		Terminated:     c.terminated.Load(),
		HandlerRuns:    c.handlerRuns.Load(),
		HandlerTime:    time.Duration(c.handlerNanos.Load()),
		HandlerMax:     time.Duration(c.handlerMax.Load()),
	}
}
