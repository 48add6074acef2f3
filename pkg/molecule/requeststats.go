package molecule

import (
	"maps"
	"sync"
	"time"
)

// requestCounts counts answers by HTTP status; 0 counts transport failures
// (no answer).
type requestCounts struct {
	mu sync.Mutex
	m  map[int]uint64
}

func (r *requestCounts) add(status int) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[int]uint64{}
	}
	r.m[status]++
	r.mu.Unlock()
}

// RequestCounts returns how many requests this client made, by the HTTP
// status of the answer; key 0 counts requests that got no answer
// (transport failures). Retries count once per attempt.
func (c *Client) RequestCounts() map[int]uint64 {
	c.counts.mu.Lock()
	defer c.counts.mu.Unlock()
	return maps.Clone(c.counts.m)
}

// budgetResetPad is added to the advertised window reset: X-RateLimit-Reset
// is whole seconds, and a request sent a little early would spend the new
// window's reserve.
const budgetResetPad = time.Second

// TakeBudget reserves one request of the platform's current rate-limit
// window unless that would leave reserve or fewer unspent — the budget the
// heartbeat needs (PROTOCOL.md §2: polling, heartbeat and notify share one
// bucket per token). It returns 0 when the caller may send now (and counts
// the request as spent until the platform's next answer says otherwise, so
// concurrent callers cannot all take the last one), else how long to wait
// for the window to reset before asking again. With no limit known it
// returns 0.
func (c *Client) TakeBudget(reserve int) time.Duration {
	c.rlMu.Lock()
	defer c.rlMu.Unlock()
	rl := &c.rl
	if !rl.Known || rl.Limit <= 0 {
		return 0
	}
	reset := rl.ResetAt().Add(budgetResetPad)
	if time.Now().After(reset) {
		// The window the observation describes is over.
		return 0
	}
	if rl.Remaining > reserve {
		rl.Remaining--
		return 0
	}
	return time.Until(reset)
}
