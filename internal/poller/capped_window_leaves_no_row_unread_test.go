package poller_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A re-read window denser than its page cap (50 pages) does not hide a
// late row behind it. Here a page holds 2 rows (each after the first
// repeats one), so a read stops after about 50; every 100th message
// commits 1.5 s late (within the quick re-reads' 2 s commit-lag slack), by
// which time the burst has put far more rows than that between it and the
// cursor. Before a capped read read on (windowChunks), every re-read
// stopped short of it — the next quick one starts where the last one
// started, and the slow one meets the same cap — and the message was
// never published.
func TestLateRowBehindACappedWindowIsPublished(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a burst of 400 messages")
	}
	const senders, each = 8, 50
	e := newEnv(t, moleculetest.WithLateCommit(0.01, 1500*time.Millisecond), moleculetest.WithRateLimit(0, 0))
	p := e.poller(poller.Config{SSE: true, PollInterval: 250 * time.Millisecond, PageLimit: 2})
	run(t, p)
	e.waitSeeded(e.ws.ID)
	waitFor(t, 10*time.Second, "event stream connected", func() bool { return e.requests(http.MethodGet, "/events/stream") > 0 })

	e.sendConcurrently(senders, each, nil)
	want := senders * each
	waitFor(t, 30*time.Second, "every message published, late ones included", func() bool { return len(e.inbound()) >= want })
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
}

// A cold start's backlog larger than one window read (50 pages of 2 rows,
// of which each page after the first repeats one: about 50 rows here) is
// delivered whole in the first cycle, before the cursor lands on its
// newest row. Before, only the newest 51 were delivered.
func TestColdStartBacklogLargerThanTheWindowCapIsDeliveredWhole(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	e.register(e.ws)
	for i := range 130 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("old ", i))
	}
	p := e.poller(poller.Config{BacklogWindow: time.Hour, PageLimit: 2})
	ids := e.messageRowIDs(e.ws.ID)
	e.runOnce(p)
	assertExactlyOnce(t, e.inbound(), ids)
}
