package poller_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// lateLag is how long after its acceptance the double commits a late row
// (it is stamped at acceptance, so it lands behind rows accepted later).
const lateLag = time.Second

// lateRowLatencies sends senders×each canvas messages from concurrent
// senders on a double where every 5th queued row commits lateLag late,
// and returns, for the late rows, the time from their commit to their
// publish on the inbound stream, sorted.
func lateRowLatencies(t *testing.T, cfg poller.Config, senders, each int) []time.Duration {
	t.Helper()
	e := newEnv(t, moleculetest.WithLateCommit(0.2, lateLag), moleculetest.WithRateLimit(0, 0))
	got := make(chan *nats.Msg, 1024)
	sub, err := e.nc.ChanSubscribe(events.InboundSubject(e.ws.ID), got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	p := e.poller(cfg)
	run(t, p)
	e.waitSeeded(e.ws.ID)
	if cfg.SSE {
		waitFor(t, 10*time.Second, "event stream connected", func() bool { return e.requests(http.MethodGet, "/events/stream") > 0 })
	}

	var mu sync.Mutex
	accepted := map[string]time.Time{}
	e.sendConcurrently(senders, each, func(text string) {
		mu.Lock()
		accepted[text] = time.Now()
		mu.Unlock()
	})
	n := senders * each
	arrived := map[string]time.Time{}
	deadline := time.After(40 * time.Second)
	for len(arrived) < n {
		select {
		case m := <-got:
			in, err := events.DecodeInbound(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if _, dup := arrived[in.Text]; !dup {
				arrived[in.Text] = time.Now()
			}
		case <-deadline:
			t.Fatalf("%d of %d messages published within 40 s", len(arrived), n)
		}
	}
	// A row that arrived a lag or more after its acceptance was a late one
	// (the others take milliseconds with the event stream).
	var late []time.Duration
	for text, at := range arrived {
		if d := at.Sub(accepted[text]); d >= lateLag-50*time.Millisecond {
			late = append(late, max(d-lateLag, 0))
		}
	}
	slices.Sort(late)
	if len(late) == 0 {
		t.Fatal("no late row: the scenario is not exercised")
	}
	return late
}

// A row the platform commits behind the cursor (8 concurrent senders, as
// on the real server) is published within a second of its commit: the
// event stream announces it, the woken poll finds nothing after the cursor
// and re-reads the last seconds at once, and the follow-ups after the
// activity catch it too. The control, with the follow-ups off and the slow
// re-read alone, waits for the next OverlapEvery.
func TestLateRowPublishedWithinASecondOfItsCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      poller.Config
		within   time.Duration
		wantSlow bool
	}{
		{name: "event stream and follow-ups (the defaults)", cfg: poller.Config{SSE: true, PollInterval: 5 * time.Second}, within: time.Second},
		{name: "follow-ups alone, a tight poller without the event stream", cfg: poller.Config{PollInterval: 200 * time.Millisecond}, within: time.Second},
		{name: "control: slow re-read alone", cfg: poller.Config{PollInterval: 200 * time.Millisecond, OverlapEvery: 4 * time.Second, OverlapFollowUps: []time.Duration{0}}, wantSlow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantSlow && testing.Short() {
				t.Skip("the control waits for the slow re-read")
			}
			late := lateRowLatencies(t, tc.cfg, 8, 5)
			worst := late[len(late)-1]
			t.Logf("%d late rows, commit to publish: p50 %s, max %s", len(late), late[len(late)/2].Round(time.Millisecond), worst.Round(time.Millisecond))
			if tc.wantSlow {
				if worst < 1500*time.Millisecond {
					t.Fatalf("control: every late row within %s without follow-ups; the scenario is not exercised", worst)
				}
				return
			}
			if worst > tc.within {
				t.Fatalf("a late row was published %s after its commit, want within %s (all: %v)", worst.Round(time.Millisecond), tc.within, late)
			}
		})
	}
}

// windowReads counts the feed reads by time window (the overlap re-reads)
// and by cursor (the polls).
func (e *env) windowReads() (window, cursor int) {
	for _, r := range e.plat.Requests() {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.Path, "/activity") {
			continue
		}
		switch {
		case strings.Contains(r.Query, "since_secs="):
			window++
		case strings.Contains(r.Query, "since_id="):
			cursor++
		}
	}
	return window, cursor
}

// The follow-ups cost an idle workspace nothing: over many polls without
// a message no window is re-read beyond the slow cadence's; one message
// brings exactly the follow-ups, then none.
func TestIdleWorkspaceGetsNoFollowUpReReads(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	// A row to seed the cursor at (an empty feed is read by window).
	e.register(e.ws)
	e.sendCanvas(e.ws.ID, "before the poller's first run")
	p := e.poller(poller.Config{PollInterval: 20 * time.Millisecond})
	run(t, p)
	e.waitSeeded(e.ws.ID)
	idlePolls := func(n int) (window int) {
		w0, c0 := e.windowReads()
		waitFor(t, 10*time.Second, "idle polls", func() bool { _, c := e.windowReads(); return c >= c0+n })
		w1, _ := e.windowReads()
		return w1 - w0
	}
	// The first cycle's whole-window re-read may end after the seed.
	idlePolls(3)
	if w := idlePolls(50); w != 0 {
		t.Fatalf("%d window re-reads in 50 idle polls, want 0", w)
	}
	e.sendCanvas(e.ws.ID, "one message")
	waitFor(t, 10*time.Second, "published", func() bool { return streamCount(t, e.topo.Inbound) == 1 })
	w0, _ := e.windowReads()
	waitFor(t, 10*time.Second, "the follow-ups", func() bool { w, _ := e.windowReads(); return w >= w0+len(poller.DefaultOverlapFollowUps) })
	if w := idlePolls(50); w != 0 {
		t.Fatalf("%d window re-reads in 50 polls after the follow-ups, want 0", w)
	}
}
