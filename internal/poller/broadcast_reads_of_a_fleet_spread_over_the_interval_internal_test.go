package poller

import (
	"fmt"
	"testing"
	"time"
)

// A fleet started together reads its broadcasts spread over the
// interval after its first read, not all in the same seconds: each
// workspace's second read comes forward by a phase of its own, never by
// more than the interval.
func TestBroadcastReadsOfAFleetSpreadOverTheInterval(t *testing.T) {
	const n, interval, buckets = 10000, DefaultBroadcastInterval, 10
	p := &Poller{cfg: Config{BroadcastInterval: interval}}
	start := time.Now()
	var perBucket [buckets]int
	for i := range n {
		w := &workspace{id: fmt.Sprintf("ws-%05d", i)}
		w.broadcastReadAt = start.Add(-broadcastPhase(w.id, interval)) // as readBroadcasts' first read records it
		due := w.broadcastReadAt.Add(interval)
		if in := due.Sub(start); in <= 0 || in > interval {
			t.Fatalf("workspace %s: second read due %s after its first, want within (0, %s]", w.id, in, interval)
		}
		if p.broadcastDue(w, due.Add(-time.Millisecond)) || !p.broadcastDue(w, due) {
			t.Fatalf("workspace %s: broadcastDue does not turn true at %s", w.id, due.Sub(start))
		}
		perBucket[int(due.Sub(start)*buckets/(interval+1))]++
	}
	for b, got := range perBucket {
		if mean := n / buckets; got < mean/2 || got > mean*2 {
			t.Errorf("%d of %d second reads fall in tenth %d of the interval, want about %d: %v", got, n, b, mean, perBucket)
		}
	}
}
