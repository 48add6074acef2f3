// Package metrics serves /livez, /healthz and a Prometheus /metrics for
// long-running workers, on prometheus/client_golang.
//
// Counters and gauges the stages already keep are read at scrape time
// (Collector), so the hot path pays nothing for them; latencies are real
// histograms observed as they happen (Histograms). Every Registry also
// carries the Go runtime and process collectors.
package metrics

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every relay metric.
const Namespace = "molecule_relay"

// NewRegistry returns a registry with the Go runtime and process
// collectors registered.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Histograms are the latency distributions the stages observe: handler
// time, reply post time, and end-to-end latency (the activity row's
// created_at to the reply's successful post).
type Histograms struct {
	Handler  prometheus.Histogram
	Post     *prometheus.HistogramVec // label route: notify, a2a
	EndToEnd *prometheus.HistogramVec // label route
}

// Bucket bounds in seconds. Handlers range from an echo (microseconds) to
// an LLM call (minutes); a post is one HTTP request bounded by its
// timeout; end to end includes the poll interval and any retry.
var (
	handlerBuckets  = []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	postBuckets     = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	endToEndBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// NewHistograms builds the histograms and registers them on reg.
func NewHistograms(reg prometheus.Registerer) *Histograms {
	h := &Histograms{
		Handler: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "handler_seconds",
			Help:    "Handler run time in seconds (successful and failed runs).",
			Buckets: handlerBuckets,
		}),
		Post: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "reply_post_seconds",
			Help:    "Time of one reply post to the platform in seconds (successful and failed), by route.",
			Buckets: postBuckets,
		}, []string{"route"}),
		EndToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "end_to_end_seconds",
			Help:    "From the inbound activity row's created_at to its reply's successful post, in seconds, by route.",
			Buckets: endToEndBuckets,
		}, []string{"route"}),
	}
	reg.MustRegister(h.Handler, h.Post, h.EndToEnd)
	return h
}

// ObserveHandler records one handler run.
func (h *Histograms) ObserveHandler(d time.Duration) { h.Handler.Observe(d.Seconds()) }

// ObservePost records one post attempt on route.
func (h *Histograms) ObservePost(route string, d time.Duration) {
	h.Post.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveDelivered records a reply posted at "at" for a row created at
// created. An unknown created_at is skipped; a platform clock ahead of
// ours counts as 0.
func (h *Histograms) ObserveDelivered(route string, created, at time.Time) {
	if created.IsZero() {
		return
	}
	h.EndToEnd.WithLabelValues(route).Observe(max(at.Sub(created), 0).Seconds())
}

// Handler serves /metrics from g, /healthz from ready (nil error → 200
// "ok", else 503 with the reason) and /livez, which touches nothing and
// answers 200 while the process serves HTTP at all: a liveness probe that
// a slow NATS cannot fail.
func Handler(g prometheus.Gatherer, ready func(ctx context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}
