package replier

import (
	"sync/atomic"
	"time"
)

// Stats counts what a Replier did. Stats() returns the totals since New;
// Drain returns the counts of that drain alone.
type Stats struct {
	// Received counts replies taken from the queue.
	Received uint64
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
	// Retried counts replies nak'd with a delay for redelivery.
	Retried uint64
	// Deferred counts replies handed back because the context's deadline
	// left no room for a post (start-margin rule).
	Deferred uint64
	// DeadLettered counts dead letters published; each is followed by a
	// Term, counted in Terminated.
	DeadLettered uint64
	Terminated   uint64
	// Posts, PostTime and PostMax describe post latency.
	Posts    uint64
	PostTime time.Duration
	PostMax  time.Duration
}

func (s Stats) sub(p Stats) Stats {
	return Stats{
		Received:     s.Received - p.Received,
		Notified:     s.Notified - p.Notified,
		SentA2A:      s.SentA2A - p.SentA2A,
		Duplicates:   s.Duplicates - p.Duplicates,
		Reconciled:   s.Reconciled - p.Reconciled,
		Reposted:     s.Reposted - p.Reposted,
		PostErrors:   s.PostErrors - p.PostErrors,
		Retried:      s.Retried - p.Retried,
		Deferred:     s.Deferred - p.Deferred,
		DeadLettered: s.DeadLettered - p.DeadLettered,
		Terminated:   s.Terminated - p.Terminated,
		Posts:        s.Posts - p.Posts,
		PostTime:     s.PostTime - p.PostTime,
		PostMax:      s.PostMax,
	}
}

type counters struct {
	received, notified, sentA2A, duplicates, reconciled, reposted  atomic.Uint64
	postErrors, retried, deferred, deadLettered, terminated, posts atomic.Uint64
	postNanos, postMax                                             atomic.Int64
}

func (c *counters) observe(d time.Duration) {
	c.posts.Add(1)
	c.postNanos.Add(int64(d))
	for {
		cur := c.postMax.Load()
		if int64(d) <= cur || c.postMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

func (c *counters) snapshot() Stats {
	return Stats{
		Received:     c.received.Load(),
		Notified:     c.notified.Load(),
		SentA2A:      c.sentA2A.Load(),
		Duplicates:   c.duplicates.Load(),
		Reconciled:   c.reconciled.Load(),
		Reposted:     c.reposted.Load(),
		PostErrors:   c.postErrors.Load(),
		Retried:      c.retried.Load(),
		Deferred:     c.deferred.Load(),
		DeadLettered: c.deadLettered.Load(),
		Terminated:   c.terminated.Load(),
		Posts:        c.posts.Load(),
		PostTime:     time.Duration(c.postNanos.Load()),
		PostMax:      time.Duration(c.postMax.Load()),
	}
}
