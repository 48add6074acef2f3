package relay_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// promqlWords are the PromQL functions, aggregations and keywords the
// dashboard may use; any other identifier in a query must be a metric or
// label the relay exports.
var promqlWords = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true,
	"rate": true, "irate": true, "increase": true, "histogram_quantile": true,
	// Labels Prometheus adds to every scraped series.
	"instance": true, "job": true,
}

var (
	promqlStrings = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlVars    = regexp.MustCompile(`\$\{?\w+\}?`)
	promqlIdents  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// checkDashboard: every query of infra/grafana/molecule-relay.json names
// at least one metric of the exposition fams, and every identifier in it
// is such a metric (a histogram's _bucket, _count or _sum included), a
// label of one, or a PromQL word.
func checkDashboard(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	b, err := os.ReadFile("../../infra/grafana/molecule-relay.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	metricNames, labels := map[string]bool{}, map[string]bool{}
	for name, f := range fams {
		metricNames[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				metricNames[name+s] = true
			}
			labels["le"] = true
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
	}
	queries := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			expr := promqlVars.ReplaceAllString(promqlStrings.ReplaceAllString(tg.Expr, `""`), "")
			named := 0
			for _, id := range promqlIdents.FindAllString(expr, -1) {
				switch {
				case metricNames[id]:
					named++
				case labels[id], promqlWords[id]:
				default:
					t.Errorf("panel %q: %q in %q is neither a metric nor a label the relay exports", p.Title, id, tg.Expr)
				}
			}
			if named == 0 {
				t.Errorf("panel %q: query %q names no metric the relay exports", p.Title, tg.Expr)
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries: is the panel list read right?", queries)
	}
	for _, want := range []string{"throughput", "latency", "lag", "dead letters", "status", "rate-limit"} {
		found := false
		for _, p := range d.Panels {
			found = found || strings.Contains(strings.ToLower(p.Title), want)
		}
		if !found {
			t.Errorf("no dashboard panel about %s", want)
		}
	}
}
