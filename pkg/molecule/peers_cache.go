package molecule

import (
	"context"
	"sync"
	"time"
)

// peersCache is the last unfiltered peer list, shared by every caller of
// one Client (the agent API, the Claude channel's sender names).
type peersCache struct {
	mu    sync.Mutex
	peers []Peer
	at    time.Time
}

// PeersCached is Peers(ctx, ""), reusing a list fetched within maxAge:
// the list changes rarely and the platform shows it only to neighbours.
// A failed fetch is not cached. The slice is shared: do not modify it.
func (c *Client) PeersCached(ctx context.Context, maxAge time.Duration) ([]Peer, error) {
	c.peers.mu.Lock()
	peers, at := c.peers.peers, c.peers.at
	c.peers.mu.Unlock()
	if peers != nil && time.Since(at) < maxAge {
		return peers, nil
	}
	peers, err := c.Peers(ctx, "")
	if err != nil {
		return nil, err
	}
	c.peers.mu.Lock()
	c.peers.peers, c.peers.at = peers, time.Now()
	c.peers.mu.Unlock()
	return peers, nil
}
