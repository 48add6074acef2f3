package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/dispatcher"
	"github.com/molecule-ai/molecule-relay/pkg/metrics"
	"github.com/molecule-ai/molecule-relay/pkg/replier"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// ServeMetrics serves /healthz and /metrics on MOLECULE_METRICS_ADDR when it
// is set; stop shuts the server down. With no address it does nothing.
func (rt *Runtime) ServeMetrics(ctx context.Context) (stop func(), err error) {
	if rt.Cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", rt.Cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("MOLECULE_METRICS_ADDR %s: %w", rt.Cfg.MetricsAddr, err)
	}
	srv := &http.Server{Handler: metrics.Handler(rt.Registry(), rt.Healthy), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			rt.Log.Error("metrics server stopped", "err", err)
		}
	}()
	rt.Log.Info("serving /healthz and /metrics", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// Registry returns the metrics of this runtime: stage counters, handler
// latency, consumer lag, platform requests by status and the rate budget.
func (rt *Runtime) Registry() *metrics.Registry {
	reg := &metrics.Registry{}
	reg.Register(rt.collectStages)
	reg.Register(rt.collectJetStream)
	reg.Register(rt.collectPlatform)
	return reg
}

func counter(name, help string, v uint64, labels map[string]string) metrics.Family {
	return metrics.Family{Name: name, Help: help, Kind: metrics.Counter, Samples: []metrics.Sample{{Labels: labels, Value: float64(v)}}}
}

func gauge(name, help string, v float64, labels map[string]string) metrics.Family {
	return metrics.Family{Name: name, Help: help, Kind: metrics.Gauge, Samples: []metrics.Sample{{Labels: labels, Value: v}}}
}

func (rt *Runtime) collectStages(context.Context) []metrics.Family {
	rt.stages.mu.Lock()
	d, r := rt.stages.disp, rt.stages.repl
	rt.stages.mu.Unlock()
	var out []metrics.Family
	if d != nil {
		s := d.Stats()
		out = append(out,
			counter("molecule_relay_handled_total", "Inbound messages whose handler succeeded.", s.Handled, nil),
			counter("molecule_relay_handler_errors_total", "Handler runs that failed.", s.HandlerErrors, nil),
			counter("molecule_relay_handler_duplicates_total", "Redeliveries of messages already handled (handler not re-run).", s.Duplicates, nil),
			counter("molecule_relay_dead_lettered_total", "Messages moved to the dead-letter stream.", s.DeadLettered, map[string]string{"stage": "dispatcher"}),
			counter("molecule_relay_handler_seconds_count", "Handler runs timed.", s.HandlerRuns, nil),
			gauge("molecule_relay_handler_seconds_sum", "Total handler time in seconds.", s.HandlerTime.Seconds(), nil),
			gauge("molecule_relay_handler_seconds_max", "Longest handler run in seconds.", s.HandlerMax.Seconds(), nil),
		)
	}
	if r != nil {
		s := r.Stats()
		out = append(out,
			counter("molecule_relay_replied_total", "Replies the platform accepted.", s.Notified, map[string]string{"route": "notify"}),
			counter("molecule_relay_replied_total", "", s.SentA2A, map[string]string{"route": "a2a"}),
			counter("molecule_relay_replied_total", "", s.Reconciled, map[string]string{"route": "reconciled"}),
			counter("molecule_relay_reply_errors_total", "Reply posts that failed.", s.PostErrors, nil),
			counter("molecule_relay_dead_lettered_total", "", s.DeadLettered, map[string]string{"stage": "replier"}),
		)
	}
	return out
}

func (rt *Runtime) collectJetStream(ctx context.Context) []metrics.Family {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var out []metrics.Family
	for _, s := range []jetstream.Stream{rt.Topo.Inbound, rt.Topo.Reply, rt.Topo.DLQ} {
		if s == nil { // not looked up by this process (MOLECULE_TOPOLOGY=lookup)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			continue
		}
		l := map[string]string{"stream": info.Config.Name}
		out = append(out,
			gauge("molecule_relay_stream_messages", "Messages stored in the stream.", float64(info.State.Msgs), l),
			counter("molecule_relay_stream_published_total", "Messages ever stored in the stream (its last sequence); for the inbound stream, messages polled and published.", info.State.LastSeq, l))
	}
	for _, c := range []jetstream.Consumer{rt.Topo.Dispatcher, rt.Topo.Replier} {
		if c == nil {
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			continue
		}
		l := map[string]string{"consumer": info.Name}
		out = append(out,
			gauge("molecule_relay_consumer_pending", "Messages not yet delivered to the consumer (lag).", float64(info.NumPending), l),
			gauge("molecule_relay_consumer_ack_pending", "Messages delivered and not yet acknowledged (in flight).", float64(info.NumAckPending), l),
			gauge("molecule_relay_consumer_redelivered", "Messages redelivered at least once and not yet acknowledged.", float64(info.NumRedelivered), l))
	}
	return out
}

func (rt *Runtime) collectPlatform(context.Context) []metrics.Family {
	req := metrics.Family{Name: "molecule_relay_platform_requests_total", Help: "Platform requests by answer status (0: no answer).", Kind: metrics.Counter}
	rem := metrics.Family{Name: "molecule_relay_rate_limit_remaining", Help: "Requests left in the platform's rate-limit window, as last reported.", Kind: metrics.Gauge}
	for _, c := range rt.Clients {
		for status, n := range c.RequestCounts() {
			req.Samples = append(req.Samples, metrics.Sample{Labels: map[string]string{"workspace": c.WorkspaceID(), "status": strconv.Itoa(status)}, Value: float64(n)})
		}
		if rl := c.RateLimit(); rl.Known && rl.Limit >= 0 {
			rem.Samples = append(rem.Samples, metrics.Sample{Labels: map[string]string{"workspace": c.WorkspaceID()}, Value: float64(rl.Remaining)})
		}
	}
	return []metrics.Family{req, rem}
}
