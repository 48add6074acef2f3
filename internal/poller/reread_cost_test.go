package poller_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A burst's rows are not read again and again by the re-reads that look
// for late commits. Issue 26's profile of a 10,000-message bench run found
// follow-up re-reads reading each row 4–5 more times, and on this burst
// the poller before this test read 24–26 rows per message by window: each
// woken poll that found its row already read re-read the last 10 s, and
// each follow-up reached back to its own activity less 2 s, over rows that
// earlier re-reads had looked through and rows ahead of the cursor that
// the next fetch reads anyway. A re-read now reads only what can still
// hold a late row (from where the previous one looked, less the commit lag,
// up to the cursor), at most twice a second. Here, a burst of canvas
// messages from concurrent senders, every 100th committed late, each
// answered with a notify as the replier would (our own replies are half of
// a busy feed): every message is published exactly once, late ones
// included, and the rows served to window reads stay bounded: the feed
// holds 2 rows per message, and a row is re-read by the re-reads of the
// followUpSlack (2 s) after the cursor passed it, one every followUpGap
// (500 ms) at most: about 5 times, 10 rows per message (measured 8.6–10);
// the bound of 15 leaves room for a loaded machine and still fails the
// poller before.
func TestBurstRereadsReadEachRowAFewTimesAtMost(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a burst of 3,000 messages")
	}
	const senders, each = 8, 375
	const n = senders * each
	e := newEnv(t, moleculetest.WithLateCommit(0.01, 300*time.Millisecond), moleculetest.WithRateLimit(0, 0))
	got := make(chan *nats.Msg, n)
	sub, err := e.nc.ChanSubscribe(events.InboundSubject(e.ws.ID), got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The bench's poller: SSE wake-ups and a 250 ms poll, the default
	// follow-ups and overlap.
	p := e.poller(poller.Config{SSE: true, PollInterval: 250 * time.Millisecond, PageLimit: poller.MaxPageLimit})
	run(t, p)
	e.waitSeeded(e.ws.ID)
	waitFor(t, 10*time.Second, "event stream connected", func() bool { return e.requests(http.MethodGet, "/events/stream") > 0 })
	window0, _ := e.plat.ActivityRowsServed()

	// The replier: one notify per published message.
	replier := e.client(e.ws)
	replies := make(chan string, n)
	var rwg sync.WaitGroup
	for range 8 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for text := range replies {
				if _, err := replier.Notify(ctx(t), "re: "+text, nil); err != nil {
					t.Errorf("notify: %v", err)
					return
				}
			}
		}()
	}
	sent := make(chan struct{})
	go func() { defer close(sent); e.sendConcurrently(senders, each, nil) }()
	seen := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(seen) < n {
		select {
		case m := <-got:
			in, err := events.DecodeInbound(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !seen[in.Text] {
				seen[in.Text] = true
				replies <- in.Text
			}
		case <-deadline:
			t.Fatalf("%d of %d messages published within 60 s", len(seen), n)
		}
	}
	<-sent
	close(replies)
	rwg.Wait()
	// The last follow-ups (3 s after the last publishing poll) end.
	settle := func() int64 { w, _ := e.plat.ActivityRowsServed(); return w }
	last := settle()
	for stable := time.Now(); time.Since(stable) < 4*time.Second; time.Sleep(250 * time.Millisecond) {
		if w := settle(); w != last {
			last, stable = w, time.Now()
		}
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))

	// The feed holds 2n rows (messages and replies). Reads by window are
	// the re-reads (and the cursor's seed, before window0).
	perMsg := float64(last-window0) / n
	t.Logf("%d messages (%d late): window re-reads served %d rows, %.2f per message; %d window reads",
		n, n/100, last-window0, perMsg, e.windowReadCount())
	if perMsg > 15 {
		t.Fatalf("window re-reads served %.2f rows per message, want at most 15 (each row read about 5 times, 2 rows per message)", perMsg)
	}
}

// windowReadCount is how many activity reads by window the double
// answered.
func (e *env) windowReadCount() int {
	w, _ := e.windowReads()
	return w
}
