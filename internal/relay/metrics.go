package relay

import (
	"context"
	"fmt"
	"sync"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/nats-io/nats.go"
)

// running holds the stage cores a Run started, for the metrics collector.
type running struct {
	mu   sync.Mutex
	disp *dispatcher.Dispatcher
	repl *replier.Replier
}

func (r *running) set(d *dispatcher.Dispatcher, p *replier.Replier) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d != nil {
		r.disp = d
	}
	if p != nil {
		r.repl = p
	}
}

// Healthy reports whether the NATS connection is up (the workers'
// readiness: /healthz).
func (rt *Runtime) Healthy(context.Context) error {
	if s := rt.Conn.NC.Status(); s != nats.CONNECTED {
		return fmt.Errorf("NATS connection %s", s)
	}
	return nil
}
