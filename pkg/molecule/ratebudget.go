package molecule

import (
	"sync"
	"time"
)

// budgetResetPad is added to the advertised window reset: X-RateLimit-Reset
// is whole seconds, and a request sent a little early would spend the new
// window's reserve.
const budgetResetPad = time.Second

// RateBudget is the client side of one platform rate-limit bucket: what
// the platform last said about it, less what was taken since. Share one
// among the Clients whose requests the platform counts together
// (Config.RateBudget). Safe for concurrent use.
type RateBudget struct {
	mu      sync.Mutex
	rl      RateLimit
	members int
}

// NewRateBudget returns an empty budget: no limit known until a response
// carries the X-RateLimit-* headers.
func NewRateBudget() *RateBudget { return &RateBudget{} }

func (b *RateBudget) join() {
	b.mu.Lock()
	b.members++
	b.mu.Unlock()
}

func (b *RateBudget) get() RateLimit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rl
}

// record stores a platform answer's observation. Answers to concurrent
// requests arrive in any order: within one window an older, higher
// Remaining never overwrites a lower one.
func (b *RateBudget) record(rl RateLimit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.rl
	sameWindow := old.Known && old.Limit == rl.Limit && absDur(old.ResetAt().Sub(rl.ResetAt())) <= budgetResetPad
	if sameWindow && rl.Remaining > old.Remaining {
		return
	}
	b.rl = rl
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TakeBudget reserves one request of the platform's current rate-limit
// window unless that would leave reserve × members or fewer unspent, where
// members is the number of Clients sharing the budget: the reserve is per
// workspace, for its heartbeat (docs/protocol.md §2: polling, heartbeat and
// notify share one bucket per token, or per org or IP). It returns 0 when
// the caller may send now (and counts the request as spent until the
// platform's next answer says otherwise, so concurrent callers cannot all
// take the last one), else how long to wait for the window to reset before
// asking again. With no limit known it returns 0.
func (c *Client) TakeBudget(reserve int) time.Duration { return c.budget.take(reserve, true) }

// DefaultPostReserve is the reserve (TakeBudget) a posting stage keeps
// for the heartbeat unless configured otherwise: the replier, a handler's
// questions to peers and its interim messages.
const DefaultPostReserve = 3

// BudgetWait is TakeBudget without the taking: 0 when TakeBudget(reserve)
// would succeed now, else how long until the window resets. It spends
// nothing, so the answer is a forecast: concurrent takers may spend what it
// saw.
func (c *Client) BudgetWait(reserve int) time.Duration { return c.budget.take(reserve, false) }

func (b *RateBudget) take(reserve int, spend bool) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	rl := &b.rl
	if !rl.Known || rl.Limit <= 0 {
		return 0
	}
	reset := rl.ResetAt().Add(budgetResetPad)
	if time.Now().After(reset) {
		// The window the observation describes is over.
		return 0
	}
	if rl.Remaining > reserve*max(b.members, 1) {
		if spend {
			rl.Remaining--
		}
		return 0
	}
	return time.Until(reset)
}
