package relay

import (
	"errors"

	"github.com/molecule-ai/molecule-relay/pkg/delegate"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrNoAsksBucket: the topology has no asks bucket (a cluster set up,
// with MOLECULE_TOPOLOGY=lookup, before delegation existed).
var ErrNoAsksBucket = errors.New("relay: no " + events.BucketAsks + " bucket: create the topology as an admin (molecule-relay status) to let handlers ask peers")

// Asker is the delegation asker of the runtime's workspaces: a handler
// uses it to ask a peer and wait for the answer (pkg/delegate). The
// dispatcher routes the answers to it on its own; MOLECULE_ASK_TIMEOUT is
// the default wait.
func (rt *Runtime) Asker() (*delegate.Asker, error) {
	if rt.Topo.Asks == nil {
		return nil, ErrNoAsksBucket
	}
	return delegate.New(delegate.Config{
		Asks:           rt.Topo.Asks,
		Clients:        rt.ClientMap(),
		DefaultTimeout: rt.Cfg.AskTimeout.D(),
		MaxWait:        rt.Topo.Config.AskTTL - events.AskTTLMargin,
		Logger:         rt.Log,
	})
}
