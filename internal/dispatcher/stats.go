package dispatcher

import (
	"sync/atomic"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// Stats counts what a Dispatcher did. Stats() returns the totals since New;
// Drain returns the counts of that drain alone. The embedded stage.Stats
// counts what every stage counts: Received, Retried, Deferred (the
// context's deadline left no room for a handler run), DeadLettered and
// Terminated.
type Stats struct {
	stage.Stats
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
	// CutByStop counts handler runs cut by the end of a graceful stop's
	// grace (their messages were handed back, not counted as errors).
	CutByStop uint64
	// MemoryErrors counts conversation-memory reads and writes that
	// failed (best-effort: the message went on without them).
	MemoryErrors uint64
	// Cancels counts tasks/cancel rows settled (a cancel mark written);
	// Cancelled counts messages their sender cancelled, before their
	// handler started or while it ran (recorded, not answered).
	Cancels   uint64
	Cancelled uint64
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
		Stats:          s.Stats.Sub(prev.Stats),
		Handled:        s.Handled - prev.Handled,
		Replied:        s.Replied - prev.Replied,
		NoReply:        s.NoReply - prev.NoReply,
		Skipped:        s.Skipped - prev.Skipped,
		Duplicates:     s.Duplicates - prev.Duplicates,
		PeerDuplicates: s.PeerDuplicates - prev.PeerDuplicates,
		HandlerErrors:  s.HandlerErrors - prev.HandlerErrors,
		CutByStop:      s.CutByStop - prev.CutByStop,
		MemoryErrors:   s.MemoryErrors - prev.MemoryErrors,
		Cancels:        s.Cancels - prev.Cancels,
		Cancelled:      s.Cancelled - prev.Cancelled,
		HandlerRuns:    s.HandlerRuns - prev.HandlerRuns,
		HandlerTime:    s.HandlerTime - prev.HandlerTime,
		HandlerMax:     s.HandlerMax,
	}
}

// counters are the dispatcher's own counters; the stage runner keeps the
// shared ones.
type counters struct {
	handled, replied, noReply, skipped, duplicates atomic.Uint64
	peerDuplicates, handlerErrors, memoryErrors    atomic.Uint64
	cutByStop, cancels, cancelled                  atomic.Uint64
	handler                                        stage.Durations
}

func (c *counters) snapshot(shared stage.Stats) Stats {
	runs, total, longest := c.handler.Load()
	return Stats{
		Stats:          shared,
		Handled:        c.handled.Load(),
		Replied:        c.replied.Load(),
		NoReply:        c.noReply.Load(),
		Skipped:        c.skipped.Load(),
		Duplicates:     c.duplicates.Load(),
		PeerDuplicates: c.peerDuplicates.Load(),
		HandlerErrors:  c.handlerErrors.Load(),
		CutByStop:      c.cutByStop.Load(),
		MemoryErrors:   c.memoryErrors.Load(),
		Cancels:        c.cancels.Load(),
		Cancelled:      c.cancelled.Load(),
		HandlerRuns:    runs,
		HandlerTime:    total,
		HandlerMax:     longest,
	}
}
