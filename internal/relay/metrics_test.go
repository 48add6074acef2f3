package relay_test

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs /metrics at base and parses it with the Prometheus text
// parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	return fams
}

func histCount(f *dto.MetricFamily) (n uint64) {
	for _, m := range f.GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// A long-running Runtime with MOLECULE_METRICS_ADDR serves /livez,
// /healthz and a /metrics whose families have the right types: counters
// as counters, latencies as histograms with one sample per handler run,
// post and delivered reply, no lifetime maxima, and the consumer lag. The
// Grafana dashboard queries only what this exposition holds.
func TestMetricsExpositionOfARunningRelay(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg, err := config.Load(nil, []string{
		"MOLECULE_PLATFORM_URL=" + w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token,
		"MOLECULE_HANDLER=echo",
		"MOLECULE_POLL_INTERVAL=200ms",
		"MOLECULE_METRICS_ADDR=" + addr,
		"NATS_URL=" + w.NATSURL(),
	})
	if err == nil {
		err = cfg.Validate(config.NeedPlatform | config.NeedHandler)
	}
	if err != nil {
		t.Fatal(err)
	}
	rt, err := relay.Open(pipelinetest.Ctx(t), cfg, pipelinetest.Logger())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer rt.Close()
	stop, err := rt.ServeMetrics(pipelinetest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx, relay.All) }()
	defer func() { cancel(); <-done }()
	w.WaitSeeded(w.Agent.ID)
	const n = 5
	w.SendMixed("m", n)
	w.WaitReplies(n, 20*time.Second)

	base := "http://" + addr
	for _, path := range []string{"/livez", "/healthz"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	var fams map[string]*dto.MetricFamily
	// The replier counts a reply after the platform accepted it, a moment
	// after the double shows it; a dispatcher that posted directly counts
	// its message handled later still, after the post.
	pipelinetest.Eventually(t, 10*time.Second, "every reply and every handled message counted", func() bool {
		fams = scrape(t, base)
		handled := fams["molecule_relay_handled_total"].GetMetric()
		return histCount(fams["molecule_relay_end_to_end_seconds"]) >= n &&
			len(handled) > 0 && handled[0].GetCounter().GetValue() >= n
	})
	checkFamilyTypes(t, fams)
	checkDashboard(t, fams)
	for name, min := range map[string]uint64{
		"molecule_relay_handler_seconds":    n,
		"molecule_relay_reply_post_seconds": n,
		"molecule_relay_end_to_end_seconds": n,
	} {
		if f := fams[name]; f.GetType() != dto.MetricType_HISTOGRAM || histCount(f) < min {
			t.Errorf("%s: type %v, %d samples; want a histogram with at least %d", name, f.GetType(), histCount(f), min)
		}
	}
	if v := fams["molecule_relay_handled_total"].GetMetric()[0].GetCounter().GetValue(); v < n {
		t.Errorf("handled_total = %v, want >= %d", v, n)
	}
	lag := map[string]bool{}
	for _, m := range fams["molecule_relay_consumer_pending"].GetMetric() {
		lag[m.GetLabel()[0].GetValue()] = true
	}
	if !lag["dispatcher"] || !lag["replier"] {
		t.Errorf("consumer_pending for %v, want dispatcher and replier", lag)
	}
	for _, name := range []string{"molecule_relay_build_info", "molecule_relay_platform_requests_total", "go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("no %s in the exposition", name)
		}
	}
}

// checkFamilyTypes: _total families are counters; no family uses the
// suffixes reserved for histograms and summaries (_count, _sum, _bucket)
// or is a lifetime maximum (_max).
func checkFamilyTypes(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for name, f := range fams {
		switch {
		case strings.HasSuffix(name, "_total") && f.GetType() != dto.MetricType_COUNTER:
			t.Errorf("%s is a %v, want a counter", name, f.GetType())
		case strings.HasSuffix(name, "_count"), strings.HasSuffix(name, "_sum"), strings.HasSuffix(name, "_bucket"), strings.HasSuffix(name, "_max"):
			t.Errorf("family %s uses a reserved suffix or is a lifetime maximum", name)
		}
	}
}

// A Lambda build (tag lambda.norpc) leaves client_golang and the
// OpenTelemetry SDK, exporter and otelhttp out of the bootstraps, which
// would otherwise grow past the 10 MB budget.
func TestLambdaBuildLeavesOutPrometheus(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-tags", "lambda.norpc", "-deps", "../../functions/poller", "../../functions/dispatcher", "../../functions/replier").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := string(out)
	if !strings.Contains(deps, "github.com/molecule-ai/molecule-relay/internal/relay") {
		t.Fatalf("the functions do not depend on pkg/relay: the check looks at the wrong packages\n%s", deps)
	}
	for _, heavy := range []string{"github.com/prometheus/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters/", "go.opentelemetry.io/contrib/"} {
		if strings.Contains(deps, heavy) {
			t.Errorf("a Lambda build depends on %s packages", heavy)
		}
	}
	out, err = exec.Command("go", "list", "-deps", "../../functions/poller").Output()
	if err != nil || !strings.Contains(string(out), "github.com/prometheus/client_golang/prometheus\n") {
		t.Errorf("a worker build of functions/poller lacks client_golang (err %v): it would serve no /metrics", err)
	}
}
