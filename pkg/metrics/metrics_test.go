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

	"github.com/molecule-ai/molecule-relay/pkg/metrics"
)

func TestTextFormat(t *testing.T) {
	var reg metrics.Registry
	reg.Register(func(context.Context) []metrics.Family {
		return []metrics.Family{{Name: "molecule_relay_handled_total", Help: "handled", Kind: metrics.Counter,
			Samples: []metrics.Sample{{Labels: map[string]string{"workspace": `a"b`}, Value: 3}}}}
	})
	reg.Register(func(context.Context) []metrics.Family {
		return []metrics.Family{
			{Name: "molecule_relay_handled_total", Kind: metrics.Counter, Samples: []metrics.Sample{{Labels: map[string]string{"workspace": "c"}, Value: 1.5}}},
			{Name: "a_gauge", Help: "first\nline", Kind: metrics.Gauge, Samples: []metrics.Sample{{Value: 7}}},
		}
	})
	var b strings.Builder
	if err := reg.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	want := "# HELP a_gauge first\\nline\n# TYPE a_gauge gauge\na_gauge 7\n" +
		"# HELP molecule_relay_handled_total handled\n# TYPE molecule_relay_handled_total counter\n" +
		"molecule_relay_handled_total{workspace=\"a\\\"b\"} 3\nmolecule_relay_handled_total{workspace=\"c\"} 1.5\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestHealthz(t *testing.T) {
	var healthy atomic.Pointer[error]
	srv := httptest.NewServer(metrics.Handler(&metrics.Registry{}, func(context.Context) error {
		if p := healthy.Load(); p != nil {
			return *p
		}
		return nil
	}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthy: %d", code)
	}
	down := errors.New("nats disconnected")
	healthy.Store(&down)
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "nats disconnected") {
		t.Fatalf("unhealthy: %d %q", code, body)
	}
	if code, _ := get("/metrics"); code != 200 {
		t.Fatalf("metrics: %d", code)
	}
}
