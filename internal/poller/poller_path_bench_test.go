package poller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

const (
	benchWS       = "35637291-d55e-4553-896c-13c2e02fe4f7"
	benchPageRows = 100 // half of them messages, half own notifies, as on a busy feed
)

// benchPage is a page of the platform's activity feed, shaped like the
// fixtures in pkg/molecule/testdata/rows; OP is replaced per request so
// every page holds new rows.
func benchPage() []byte {
	var rows []string
	base := time.Date(2026, 11, 21, 17, 25, 36, 0, time.UTC)
	for i := range benchPageRows {
		at := base.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)
		if i%2 == 1 {
			rows = append(rows, fmt.Sprintf(`{"activity_type":"a2a_receive","created_at":%q,"duration_ms":null,"error_detail":null,`+
				`"id":"OP-%d","method":"notify","response_body":{"result":"echo: hello from canvas %d"},`+
				`"source_id":null,"status":"ok","summary":"Agent message: echo: hello from canvas %d","target_id":null,"workspace_id":%q}`,
				at, i, i, i, benchWS))
			continue
		}
		rows = append(rows, fmt.Sprintf(`{"activity_type":"a2a_receive","created_at":%q,"duration_ms":null,"error_detail":null,`+
			`"id":"OP-%d","method":"message/send","request_body":{"id":"1f6b5d85-3c2a-4e71-9d0b-8a4f2e6c1b37","method":"message/send",`+
			`"params":{"message":{"role":"user","parts":[{"kind":"text","text":"hello from canvas %d"}],"messageId":"m-OP-%d"},"metadata":{"history":[]}},"jsonrpc":"2.0"},`+
			`"source_id":null,"status":"ok","summary":"message/send → ext-A (queued for poll)","target_id":%q,"workspace_id":%q}`,
			at, i, i, i, benchWS, benchWS))
	}
	return []byte("[" + strings.Join(rows, ",") + "]")
}

// BenchmarkPollerPath measures the poller's per-message path on a page of
// benchPageRows rows read from a loopback HTTP server: "decode" reads the
// page and parses and encodes every message row (no NATS); "publish" also
// publishes them to an embedded NATS server (in this process, so its own
// allocations count) and waits for the acks, as Poller.deliver does.
// Figures are per relayed message (a non-notify row).
func BenchmarkPollerPath(b *testing.B) {
	page := benchPage()
	var op atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(bytes.ReplaceAll(page, []byte("OP"), []byte("r"+strconv.FormatInt(op.Add(1), 10))))
	}))
	b.Cleanup(srv.Close)
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL, WorkspaceID: benchWS, Token: "t"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	read := func(b *testing.B) *molecule.ActivityPage {
		p, err := c.Activity(ctx, molecule.ActivityQuery{Type: activityType, SinceID: "x", Limit: benchPageRows})
		if err != nil || len(p.Rows) != benchPageRows {
			b.Fatalf("activity: %v", err)
		}
		return p
	}
	b.Run("decode", func(b *testing.B) {
		perMessage(b, func() int {
			n := 0
			for _, row := range read(b).Rows {
				if row.Method == "notify" {
					continue
				}
				m, err := row.Parse(benchWS) // as publishRow does
				if err != nil {
					b.Fatal(err)
				}
				if _, err := events.NewInbound(benchWS, m, time.Now()).Marshal(); err != nil {
					b.Fatal(err)
				}
				n++
			}
			return n
		})
	})
	b.Run("publish", func(b *testing.B) {
		ns := natstest.Start(b)
		_, js := natstest.Connect(b, ns.ClientURL())
		topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
		if err != nil {
			b.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		p, err := New(js, topo, Config{Workspaces: []*molecule.Client{c}, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		w := p.ws[0]
		perMessage(b, func() int {
			res := &WorkspaceResult{Skipped: map[string]int{}}
			if err := p.deliver(ctx, w, read(b).Rows, &cursorValue{}, time.Now(), res); err != nil {
				b.Fatal(err)
			}
			return res.Published
		})
	})
}

// perMessage runs one page per iteration and reports time and
// allocations per message the page held.
func perMessage(b *testing.B, onePage func() int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	msgs := 0
	b.ResetTimer()
	for range b.N {
		msgs += onePage()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if msgs == 0 {
		b.Fatal("no messages")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(msgs), "allocs/msg")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(msgs), "B/msg")
}
