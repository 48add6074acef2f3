package mcpchannel

import (
	"context"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// How long a workspace's peer list is reused (the client keeps it), and
// how long one lookup may delay showing a message.
const (
	peerTTL       = time.Minute
	peerLookupMax = 3 * time.Second
)

// peerDirectory names the sender of a peer message for the header and
// meta when the envelope does not: a 2026-08 platform names it
// (include=peer_info), older ones ignore the flag (docs/claude-channel.md);
// the watched workspace's peer list (GET /registry/:id/peers) has name and
// role, as the TypeScript channel's registry enrichment used. A failed lookup is
// remembered for peerTTL too (a platform that is down must not delay every
// message by peerLookupMax) and leaves the name out.
type peerDirectory struct {
	clients map[string]*molecule.Client

	mu     sync.Mutex
	failed map[string]time.Time // by watched workspace: when its lookup last failed
}

func newPeerDirectory(clients map[string]*molecule.Client) *peerDirectory {
	return &peerDirectory{clients: clients, failed: map[string]time.Time{}}
}

// enrich returns in, or a copy with PeerName and PeerRole from the peer
// list when in is a peer's message without them.
func (d *peerDirectory) enrich(ctx context.Context, in *events.Inbound) *events.Inbound {
	if d == nil || in.Source != events.SourcePeerAgent || in.PeerName != "" {
		return in
	}
	for _, p := range d.peers(ctx, in.WorkspaceID) {
		if p.ID == in.SourceWorkspaceID {
			c := *in
			c.PeerName, c.PeerRole = p.Name, p.Role
			return &c
		}
	}
	return in
}

// peers is ws's peer list (the client caches it for peerTTL), or none
// while its last lookup failed less than peerTTL ago.
func (d *peerDirectory) peers(ctx context.Context, ws string) []molecule.Peer {
	c := d.clients[ws]
	d.mu.Lock()
	failedAt, failed := d.failed[ws]
	d.mu.Unlock()
	if c == nil || failed && time.Since(failedAt) < peerTTL {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, peerLookupMax)
	defer cancel()
	peers, err := c.PeersCached(ctx, peerTTL)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.failed[ws] = time.Now()
		return nil
	}
	delete(d.failed, ws)
	return peers
}
