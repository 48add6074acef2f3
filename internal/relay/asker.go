package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrNoAsksBucket: the topology has no asks bucket (a cluster set up,
// with MOLECULE_TOPOLOGY=lookup, before delegation existed).
var ErrNoAsksBucket = errors.New("relay: no " + events.BucketAsks + " bucket: create the topology as an admin (molecule-relay status) to let handlers ask peers")

// Asker is the delegation asker of the runtime's workspaces: a handler
// uses it to ask a peer and wait for the answer (internal/delegate). The
// dispatcher routes the answers to it on its own; MOLECULE_ASK_TIMEOUT is
// the default wait.
func (rt *Runtime) Asker() (*delegate.Asker, error) {
	if rt.Topo.Asks == nil {
		return nil, ErrNoAsksBucket
	}
	return delegate.New(delegate.Config{
		Asks:           rt.Topo.Asks,
		Clients:        rt.startClients(),
		Lookup:         rt.lookup(),
		DefaultTimeout: rt.Cfg.AskTimeout.D(),
		MaxWait:        rt.Topo.Config.AskTTL - events.AskTTLMargin,
		Logger:         rt.Log, // delegate.New names the stage
	})
}

// agentAsker is the agent API's POST /v1/ask: the runtime's Asker, or nil
// (the API then answers 501) when the topology has no asks bucket.
func (rt *Runtime) agentAsker() agentapi.Asker {
	a, err := rt.Asker()
	if err != nil {
		rt.Log.Warn("agent API: asking a peer is off", "error", err)
		return nil
	}
	return apiAsker{a}
}

// apiAsker adapts delegate.Asker to agentapi.Asker, and its errors to the
// API's statuses: a bad question 400, no answer in time 504.
type apiAsker struct{ a *delegate.Asker }

func (x apiAsker) Ask(ctx context.Context, sc agentapi.Scope, q handler.Question) (*handler.PeerAnswer, error) {
	in := sc.Message
	ans, err := x.a.Ask(ctx, delegate.Scope{Workspace: in.WorkspaceID, Activity: in.ActivityID, N: sc.N,
		ContextID: in.ContextID, Deadline: sc.Deadline, Hops: in.Hops}, q)
	switch {
	case errors.Is(err, delegate.ErrInvalidQuestion), errors.Is(err, delegate.ErrMismatch):
		return nil, fmt.Errorf("%w: %w", agentapi.ErrBadRequest, err)
	case errors.Is(err, delegate.ErrNoAnswer):
		return nil, fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
	}
	return ans, err
}
