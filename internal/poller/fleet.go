// Workspaces started and stopped one at a time (poller groups, the workspace registry).

package poller

import (
	"context"
	"errors"
	"fmt"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrUnknownWorkspace: PollWorkspace was given a workspace the poller was
// not configured with.
var ErrUnknownWorkspace = errors.New("poller: workspace not configured")

// PollWorkspace polls one of the configured workspaces as Run does (poll
// loop, heartbeats, event stream) until ctx ends or the workspace cannot
// be polled any more, and returns after all of it ended: a poller group
// (internal/pollgroup) starts and stops single workspaces with it as they
// move between its members. Each call starts from what the stores hold,
// not from what this process remembered of an earlier call: another
// member may have polled the workspace meanwhile. The error is nil when
// ctx ended; otherwise the reason the workspace stopped.
func (p *Poller) PollWorkspace(ctx context.Context, id string) error {
	var c *molecule.Client
	for _, w := range p.ws {
		if w.id == id {
			c = w.c
		}
	}
	if v, ok := p.added.Load(id); ok {
		c = v.(*molecule.Client)
	}
	if c == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkspace, id)
	}
	p.statusCache.Delete(id)
	w := p.newWorkspace(c)
	done := make(chan error, 1)
	p.startWorkspace(ctx, w, func(err error) { done <- err })
	return <-done
}

// AddClient makes a workspace known to PollWorkspace after New (the
// workspace registry added it while the relay runs); a client added again
// for the same id replaces the earlier one (a new token).
func (p *Poller) AddClient(c *molecule.Client) { p.added.Store(c.WorkspaceID(), c) }

// StartClient polls c's workspace, added while Run runs, until stop is
// called or ctx ends. stop returns once its loop, event stream and
// heartbeats ended: no poll of it runs any more. Messages already
// published are left to the dispatcher and the replier, which answer
// them as any other.
func (p *Poller) StartClient(ctx context.Context, c *molecule.Client) (stop func()) {
	p.AddClient(c)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.PollWorkspace(ctx, c.WorkspaceID()); err != nil {
			p.log.Error("poller: stopped polling this workspace", "workspace", c.WorkspaceID(), "error", err)
		}
	}()
	return func() { cancel(); <-done }
}
