// Package metrics serves /healthz and a Prometheus text-format /metrics for
// long-running workers. Values are read from the stages at scrape time, so
// the hot path pays nothing for them.
//
// It writes the text exposition format (version 0.0.4) itself instead of
// importing the Prometheus client: we expose a handful of counters and
// gauges the stages already keep, and the format is small and stable.
package metrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Kind is a metric type.
type Kind string

const (
	Counter Kind = "counter"
	Gauge   Kind = "gauge"
)

// Sample is one value with its labels.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Family is a named metric with its samples.
type Family struct {
	Name    string
	Help    string
	Kind    Kind
	Samples []Sample
}

// Collector returns families at scrape time. It must be safe to call
// concurrently and should return quickly; ctx carries the scrape's deadline.
type Collector func(ctx context.Context) []Family

// Registry holds collectors.
type Registry struct {
	mu         sync.Mutex
	collectors []Collector
}

// Register adds a collector.
func (r *Registry) Register(c Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
}

// Write gathers every collector and writes the text format, families sorted
// by name; families of the same name from several collectors are merged.
func (r *Registry) Write(ctx context.Context, w io.Writer) error {
	r.mu.Lock()
	cs := append([]Collector(nil), r.collectors...)
	r.mu.Unlock()
	byName := map[string]*Family{}
	for _, c := range cs {
		for _, f := range c(ctx) {
			if g, ok := byName[f.Name]; ok {
				g.Samples = append(g.Samples, f.Samples...)
				continue
			}
			f := f
			byName[f.Name] = &f
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		f := byName[n]
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Kind)
		for _, s := range f.Samples {
			b.WriteString(f.Name)
			writeLabels(&b, s.Labels)
			b.WriteByte(' ')
			b.WriteString(formatValue(s.Value))
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeLabels(b *strings.Builder, l map[string]string) {
	if len(l) == 0 {
		return
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(escapeLabel(l[k]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Handler serves /metrics from reg and /healthz from healthy (nil error →
// 200 "ok", else 503 with the reason).
func Handler(reg *Registry, healthy func(ctx context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = reg.Write(r.Context(), w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}
