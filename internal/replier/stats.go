package replier

import (
	"sync/atomic"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// Stats counts what a Replier did. Stats() returns the totals since New;
// Drain returns the counts of that drain alone. The embedded stage.Stats
// counts what every stage counts: Received, Retried, Deferred (the
// context's deadline left no room for a post), DeadLettered and
// Terminated.
type Stats struct {
	stage.Stats
	// Notified and SentA2A count replies the platform accepted, by route.
	Notified uint64
	SentA2A  uint64
	// Duplicates counts redeliveries of replies already recorded as sent:
	// acked without a post.
	Duplicates uint64
	// Reconciled counts canvas replies found on the workspace's feed after
	// a crash between the POST and the "sent" record: marked sent, not
	// posted again.
	Reconciled uint64
	// Reposted counts posts of a reply whose earlier post had an unknown
	// outcome: peer replies (the platform de-duplicates on messageId), and
	// canvas replies the feed proved were not delivered.
	Reposted uint64
	// PostErrors counts failed posts.
	PostErrors uint64
	// MemoryErrors counts sent replies whose turns could not be recorded
	// in the conversation's memory (best-effort: the reply was acked).
	MemoryErrors uint64
	// Direct counts replies the dispatcher's stage runner in this process
	// posted in the inbound message's slot (PostDirect), skipping the reply stream; they are counted
	// in Notified or SentA2A too. DirectFallbacks counts the replies
	// PostDirect left to the stream (not posted, or not known to be).
	// DirectRefused counts direct posts the platform refused for good,
	// dead-lettered from the direct path (DeadLetterDirect); their dead
	// letters are counted in DeadLettered too.
	Direct          uint64
	DirectFallbacks uint64
	DirectRefused   uint64
	// Posts, PostTime and PostMax describe post latency.
	Posts    uint64
	PostTime time.Duration
	PostMax  time.Duration
}

func (s Stats) sub(p Stats) Stats {
	return Stats{
		Stats:           s.Stats.Sub(p.Stats),
		Notified:        s.Notified - p.Notified,
		SentA2A:         s.SentA2A - p.SentA2A,
		Duplicates:      s.Duplicates - p.Duplicates,
		Reconciled:      s.Reconciled - p.Reconciled,
		Reposted:        s.Reposted - p.Reposted,
		PostErrors:      s.PostErrors - p.PostErrors,
		MemoryErrors:    s.MemoryErrors - p.MemoryErrors,
		Direct:          s.Direct - p.Direct,
		DirectFallbacks: s.DirectFallbacks - p.DirectFallbacks,
		DirectRefused:   s.DirectRefused - p.DirectRefused,
		Posts:           s.Posts - p.Posts,
		PostTime:        s.PostTime - p.PostTime,
		PostMax:         s.PostMax,
	}
}

// counters are the replier's own counters; the stage runner keeps the
// shared ones.
type counters struct {
	notified, sentA2A, duplicates, reconciled, reposted, postErrors atomic.Uint64
	memoryErrors, direct, directFallbacks, directRefused            atomic.Uint64
	// directDeadLettered counts the dead letters DeadLetterDirect wrote,
	// which the stage runner's DeadLettered does not see.
	directDeadLettered atomic.Uint64
	post               stage.Durations
}

func (c *counters) snapshot(shared stage.Stats) Stats {
	posts, total, longest := c.post.Load()
	shared.DeadLettered += c.directDeadLettered.Load()
	return Stats{
		Stats:           shared,
		Notified:        c.notified.Load(),
		SentA2A:         c.sentA2A.Load(),
		Duplicates:      c.duplicates.Load(),
		Reconciled:      c.reconciled.Load(),
		Reposted:        c.reposted.Load(),
		PostErrors:      c.postErrors.Load(),
		MemoryErrors:    c.memoryErrors.Load(),
		Direct:          c.direct.Load(),
		DirectFallbacks: c.directFallbacks.Load(),
		DirectRefused:   c.directRefused.Load(),
		Posts:           posts,
		PostTime:        total,
		PostMax:         longest,
	}
}
