//go:build lambda.norpc

package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/replier"
)

// promState is empty in a Lambda build: see metrics_prom.go.
type promState struct{}

// ServeMetrics refuses MOLECULE_METRICS_ADDR in a Lambda build, which has
// no Prometheus exposition (nothing scrapes a function); with no address it
// does nothing.
func (rt *Runtime) ServeMetrics(context.Context) (stop func(), err error) {
	if rt.Cfg.MetricsAddr != "" {
		return nil, fmt.Errorf("MOLECULE_METRICS_ADDR %s: this binary is a Lambda build (tag lambda.norpc) without /metrics; unset it, or run the container image or the molecule-relay CLI", rt.Cfg.MetricsAddr)
	}
	return func() {}, nil
}

func (rt *Runtime) handlerObserver() func(time.Duration) { return nil }

func (rt *Runtime) replyObserver() replier.Observer { return nil }
