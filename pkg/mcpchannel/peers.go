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
// meta. The platform in the field ignores include=peer_info, so envelopes
// carry no peer name (docs/claude-channel.md); the watched
// workspace's peer list (GET /registry/:id/peers) has name and role, as
// the TypeScript channel's registry enrichment used. A failed lookup is
// remembered for peerTTL too (a platform that is down must not delay every
// message by peerLookupMax) and leaves the name out.
type peerDirectory struct {
	clients map[string]*molecule.Client

	mu    sync.Mutex
	lists map[string]peerList // by watched workspace
}

type peerList struct {
	at   time.Time
	byID map[string]molecule.Peer
}

func newPeerDirectory(clients map[string]*molecule.Client) *peerDirectory {
	return &peerDirectory{clients: clients, lists: map[string]peerList{}}
}

// enrich returns in, or a copy with PeerName and PeerRole from the peer
// list when in is a peer's message without them.
func (d *peerDirectory) enrich(ctx context.Context, in *events.Inbound) *events.Inbound {
	if d == nil || in.Source != events.SourcePeerAgent || in.PeerName != "" {
		return in
	}
	p, ok := d.list(ctx, in.WorkspaceID).byID[in.SourceWorkspaceID]
	if !ok {
		return in
	}
	c := *in
	c.PeerName, c.PeerRole = p.Name, p.Role
	return &c
}

func (d *peerDirectory) list(ctx context.Context, ws string) peerList {
	d.mu.Lock()
	l, ok := d.lists[ws]
	d.mu.Unlock()
	if ok && time.Since(l.at) < peerTTL {
		return l
	}
	l = peerList{at: time.Now(), byID: map[string]molecule.Peer{}}
	if c := d.clients[ws]; c != nil {
		ctx, cancel := context.WithTimeout(ctx, peerLookupMax)
		defer cancel()
		if peers, err := c.PeersCached(ctx, peerTTL); err == nil {
			for _, p := range peers {
				l.byID[p.ID] = p
			}
		}
	}
	d.mu.Lock()
	d.lists[ws] = l
	d.mu.Unlock()
	return l
}
