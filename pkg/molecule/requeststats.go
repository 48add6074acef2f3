package molecule

import (
	"maps"
	"sync"
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
