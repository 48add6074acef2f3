//go:build !lambda.norpc

// The Prometheus exposition. A Lambda build (tag lambda.norpc, which every
// bootstrap build uses: Makefile.deploy, sam build) leaves it out: nothing
// scrapes a Lambda function, and client_golang would add 2.2 MB to each
// 8.1 MB arm64 bootstrap, past the 10 MB budget (metrics_lambda.go).

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

	"github.com/molecule-ai/molecule-relay/internal/metrics"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/version"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// promState is the runtime's metrics registry, built on first use.
type promState struct {
	once     sync.Once
	registry *prometheus.Registry
	hist     *metrics.Histograms
}

// ServeMetrics serves /livez, /healthz and /metrics on MOLECULE_METRICS_ADDR
// when it is set; stop shuts the server down. With no address it does
// nothing.
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
	rt.Log.Info("serving /livez, /healthz and /metrics", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// Registry returns the metrics of this runtime: stage counters, the
// latency histograms, consumer lag, platform requests by status, the rate
// budget, and the Go runtime and process collectors. It is built once.
func (rt *Runtime) Registry() *prometheus.Registry {
	p := &rt.prom
	p.once.Do(func() {
		p.registry = metrics.NewRegistry()
		p.hist = metrics.NewHistograms(p.registry)
		p.registry.MustRegister(
			collectorFunc{describeStages, rt.collectStages},
			collectorFunc{describeJetStream, rt.collectJetStream},
			collectorFunc{describePlatform, rt.collectPlatform},
			versionInfo(),
		)
	})
	return p.registry
}

// handlerObserver receives the dispatcher's handler times.
func (rt *Runtime) handlerObserver() func(time.Duration) {
	rt.Registry()
	return rt.prom.hist.ObserveHandler
}

// replyObserver receives the replier's post times and deliveries.
func (rt *Runtime) replyObserver() replier.Observer {
	rt.Registry()
	return rt.prom.hist
}

// collectorFunc is a prometheus.Collector that reads its values at scrape
// time from what the stages keep.
type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metrics.Namespace+"_"+name, help, labels, nil)
}

var (
	descHandled      = desc("handled_total", "Inbound messages whose handler succeeded.")
	descHandlerErrs  = desc("handler_errors_total", "Handler runs that failed.")
	descDuplicates   = desc("handler_duplicates_total", "Redeliveries of messages already handled (handler not re-run).")
	descDeadLettered = desc("dead_lettered_total", "Messages moved to the dead-letter stream, by stage.", "stage")
	descReplied      = desc("replied_total", "Replies the platform accepted (or found delivered: reconciled), by route.", "route")
	descReplyErrs    = desc("reply_errors_total", "Reply posts that failed.")
	descDirect       = desc("replies_direct_total", "Replies the dispatcher handed to the replier of its process, by path: direct (posted in the dispatcher's slot; counted in replied_total too), stream (left to the reply stream) or refused (refused for good by the platform and dead-lettered from the direct path; counted in dead_lettered_total too).", "path")
	descMemoryErrs   = desc("memory_errors_total", "Conversation-memory reads and writes that failed (the message went on without them), by stage.", "stage")
	describeStages   = []*prometheus.Desc{descHandled, descHandlerErrs, descDuplicates, descDeadLettered, descReplied, descReplyErrs, descDirect, descMemoryErrs}

	descStreamMsgs    = desc("stream_messages", "Messages stored in the stream.", "stream")
	descStreamPub     = desc("stream_published_total", "Messages ever stored in the stream (its last sequence); for the inbound stream, messages polled and published.", "stream")
	descPending       = desc("consumer_pending", "Messages not yet delivered to the consumer (lag).", "consumer")
	descAckPending    = desc("consumer_ack_pending", "Messages delivered and not yet acknowledged (in flight).", "consumer")
	descRedelivered   = desc("consumer_redelivered", "Messages redelivered at least once and not yet acknowledged.", "consumer")
	describeJetStream = []*prometheus.Desc{descStreamMsgs, descStreamPub, descPending, descAckPending, descRedelivered}

	descRequests     = desc("platform_requests_total", "Platform requests by answer status (0: no answer).", "workspace", "status")
	descRateRemain   = desc("rate_limit_remaining", "Requests left in the platform's rate-limit window, as last reported.", "workspace")
	describePlatform = []*prometheus.Desc{descRequests, descRateRemain}
)

func counterOf(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gaugeOf(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (rt *Runtime) collectStages(ch chan<- prometheus.Metric) {
	rt.stages.mu.Lock()
	d, r := rt.stages.disp, rt.stages.repl
	rt.stages.mu.Unlock()
	if d != nil {
		s := d.Stats()
		ch <- counterOf(descHandled, s.Handled)
		ch <- counterOf(descHandlerErrs, s.HandlerErrors)
		ch <- counterOf(descDuplicates, s.Duplicates)
		ch <- counterOf(descDeadLettered, s.DeadLettered, "dispatcher")
		ch <- counterOf(descMemoryErrs, s.MemoryErrors, "dispatcher")
	}
	if r != nil {
		s := r.Stats()
		ch <- counterOf(descReplied, s.Notified, "notify")
		ch <- counterOf(descReplied, s.SentA2A, "a2a")
		ch <- counterOf(descReplied, s.Reconciled, "reconciled")
		ch <- counterOf(descReplyErrs, s.PostErrors)
		ch <- counterOf(descDirect, s.Direct, "direct")
		ch <- counterOf(descDirect, s.DirectFallbacks, "stream")
		ch <- counterOf(descDirect, s.DirectRefused, "refused")
		ch <- counterOf(descDeadLettered, s.DeadLettered, "replier")
		ch <- counterOf(descMemoryErrs, s.MemoryErrors, "replier")
	}
}

// collectJetStream asks the server for the streams' and consumers' state:
// up to 5 JetStream API calls, bounded together by 2 s. That is why
// liveness is /livez, not /metrics.
func (rt *Runtime) collectJetStream(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range []jetstream.Stream{rt.Topo.Inbound, rt.Topo.Reply, rt.Topo.DLQ} {
		if s == nil { // not looked up by this process (MOLECULE_TOPOLOGY=lookup)
			continue
		}
		if info, err := s.Info(ctx); err == nil {
			ch <- gaugeOf(descStreamMsgs, float64(info.State.Msgs), info.Config.Name)
			ch <- counterOf(descStreamPub, info.State.LastSeq, info.Config.Name)
		}
	}
	for _, c := range []jetstream.Consumer{rt.Topo.Dispatcher, rt.Topo.Replier} {
		if c == nil {
			continue
		}
		if info, err := c.Info(ctx); err == nil {
			ch <- gaugeOf(descPending, float64(info.NumPending), info.Name)
			ch <- gaugeOf(descAckPending, float64(info.NumAckPending), info.Name)
			ch <- gaugeOf(descRedelivered, float64(info.NumRedelivered), info.Name)
		}
	}
}

func (rt *Runtime) collectPlatform(ch chan<- prometheus.Metric) {
	for _, c := range rt.liveClients() {
		for status, n := range c.RequestCounts() {
			ch <- counterOf(descRequests, n, c.WorkspaceID(), strconv.Itoa(status))
		}
		if rl := c.RateLimit(); rl.Known && rl.Limit >= 0 {
			ch <- gaugeOf(descRateRemain, float64(rl.Remaining), c.WorkspaceID())
		}
	}
}

// versionInfo is molecule_relay_build_info{version}: always 1, so a
// dashboard can show (and join on) the running version.
func versionInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "build_info",
		Help:        "Always 1; the version label is the relay's version.",
		ConstLabels: prometheus.Labels{"version": version.String()},
	}, func() float64 { return 1 })
}
