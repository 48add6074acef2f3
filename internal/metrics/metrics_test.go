package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// parse reads a text exposition with the Prometheus text parser.
func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	return fams
}

// The histograms are real histograms (cumulative buckets, +Inf = count),
// and every registry carries the Go runtime and process collectors.
func TestHistogramsAndRuntimeCollectorsInExposition(t *testing.T) {
	reg := metrics.NewRegistry()
	h := metrics.NewHistograms(reg)
	h.ObserveHandler(30 * time.Millisecond)
	h.ObserveHandler(2 * time.Second)
	h.ObservePost("notify", 80*time.Millisecond)
	created := time.Now().Add(-3 * time.Second)
	h.ObserveDelivered("notify", created, created.Add(3*time.Second))
	h.ObserveDelivered("a2a", time.Time{}, time.Now())           // unknown created_at: skipped
	h.ObserveDelivered("a2a", created.Add(time.Minute), created) // platform clock ahead: 0
	srv := httptest.NewServer(metrics.Handler(reg, func(context.Context) error { return nil }))
	defer srv.Close()
	code, body := get(t, srv.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	fams := parse(t, body)

	hs := fams["molecule_relay_handler_seconds"]
	if hs.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("handler_seconds is %v, want a histogram", hs.GetType())
	}
	hist := hs.Metric[0].GetHistogram()
	if hist.GetSampleCount() != 2 || hist.GetSampleSum() < 2.02 || hist.GetSampleSum() > 2.04 {
		t.Errorf("handler_seconds count %d sum %v, want 2 and 2.03", hist.GetSampleCount(), hist.GetSampleSum())
	}
	for _, b := range hist.Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 0.03 {
			want++
		}
		if b.GetUpperBound() >= 2 {
			want++
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("handler_seconds bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	e2e := map[string]*dto.Histogram{}
	for _, m := range fams["molecule_relay_end_to_end_seconds"].GetMetric() {
		e2e[m.Label[0].GetValue()] = m.GetHistogram()
	}
	if n := e2e["notify"]; n.GetSampleCount() != 1 || n.GetSampleSum() != 3 {
		t.Errorf("end_to_end notify: %v", n)
	}
	if a := e2e["a2a"]; a.GetSampleCount() != 1 || a.GetSampleSum() != 0 {
		t.Errorf("end_to_end a2a: %v (want one 0 s sample: the zero created_at skipped, the future one clamped)", a)
	}
	if fams["molecule_relay_reply_post_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("reply_post_seconds is not a histogram")
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s: the Go runtime and process collectors are missing", name)
		}
	}
}

// /livez touches nothing and is 200 whatever readiness says; /healthz is
// readiness: 503 with the reason while not ready.
func TestLivezAndHealthz(t *testing.T) {
	var ready atomic.Pointer[error]
	srv := httptest.NewServer(metrics.Handler(metrics.NewRegistry(), func(context.Context) error {
		if p := ready.Load(); p != nil {
			return *p
		}
		return nil
	}))
	defer srv.Close()
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Fatalf("ready: /healthz %d", code)
	}
	down := errors.New("NATS connection RECONNECTING")
	ready.Store(&down)
	if code, body := get(t, srv.URL+"/healthz"); code != 503 || !strings.Contains(body, "RECONNECTING") {
		t.Fatalf("not ready: /healthz %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/livez"); code != 200 || body != "ok\n" {
		t.Fatalf("not ready: /livez %d %q, want 200", code, body)
	}
}
