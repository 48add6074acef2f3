package poller_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Late-committed rows (created_at before rows the cursor already passed)
// are delivered by the overlap re-read; the control without it loses them,
// which shows the test can fail.
func TestLateCommittedRowsDeliveredByOverlapReRead(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name    string
		overlap time.Duration
	}{
		{"with overlap re-read", 10 * time.Second},
		{"control without overlap", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every 5th queued row commits 300 ms late.
			e := newEnv(t, moleculetest.WithLateCommit(0.2, 300*time.Millisecond), moleculetest.WithRateLimit(0, 0))
			p := e.poller(poller.Config{PollInterval: 10 * time.Millisecond, OverlapWindow: tc.overlap, OverlapEvery: 100 * time.Millisecond})
			run(t, p)
			e.waitSeeded(e.ws.ID)
			for i := range n {
				e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
			}
			ids := e.messageRowIDs(e.ws.ID)
			if tc.overlap > 0 {
				waitFor(t, 15*time.Second, "every row published", func() bool { return streamCount(t, e.topo.Inbound) >= n })
				assertExactlyOnce(t, e.inbound(), ids)
				return
			}
			// The newest row is itself late: once the cursor reaches it, the
			// earlier late rows are visible but behind the cursor.
			waitFor(t, 15*time.Second, "cursor at the newest row", func() bool {
				st, err := p.Status(ctx(t))
				return err == nil && st[0].Cursor == ids[len(ids)-1]
			})
			if got := streamCount(t, e.topo.Inbound); got >= n {
				t.Fatalf("control delivered all %d rows without the overlap re-read; the late-commit scenario is not exercised", got)
			} else {
				t.Logf("control: %d of %d rows delivered without the overlap re-read", got, n)
			}
		})
	}
}

// With SSE wake-ups, a queued message reaches JetStream in milliseconds
// even though the poll timer is 10 s.
func TestSSEWakeUpLatency(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	p := e.poller(poller.Config{SSE: true, PollInterval: 10 * time.Second})
	got := make(chan *nats.Msg, 64)
	sub, err := e.nc.ChanSubscribe(events.InboundSubject(e.ws.ID), got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	run(t, p)
	e.waitSeeded(e.ws.ID)
	waitFor(t, 10*time.Second, "event stream connected", func() bool { return e.requests(http.MethodGet, "/events/stream") > 0 })

	// Warm-up: the stream may subscribe a moment after the request.
	e.sendCanvas(e.ws.ID, "warm-up")
	select {
	case <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("warm-up message not published")
	}
	const n = 20
	lat := make([]time.Duration, 0, n)
	for i := range n {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
		sent := time.Now()
		select {
		case <-got:
			lat = append(lat, time.Since(sent))
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d not published within 5s (the timer is 10s: SSE wake-up failed)", i)
		}
	}
	slices.Sort(lat)
	p50, p90 := lat[n/2], lat[n*9/10]
	t.Logf("queued → published to JetStream over %d messages: p50 %s, p90 %s, max %s", n, p50, p90, lat[n-1])
	if p50 >= 100*time.Millisecond {
		t.Fatalf("p50 latency %s, want well under 100ms", p50)
	}
}

// Paced by the platform's headers, a tight poll loop never meets a 429 and
// the heartbeat always gets through.
func TestPacingNeverTrips429(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(20, time.Second))
	p := e.poller(poller.Config{PollInterval: 5 * time.Millisecond, RateReserve: 6, HeartbeatInterval: 500 * time.Millisecond})
	run(t, p)
	e.waitSeeded(e.ws.ID)
	e.sendCanvas(e.ws.ID, "a") // the canvas send uses the IP bucket, not the token's
	start := time.Now()
	waitFor(t, 20*time.Second, "five seconds of polling (at least two bursts: a window and its pad)", func() bool { return time.Since(start) > 5*time.Second })
	e.sendCanvas(e.ws.ID, "b")
	waitFor(t, 10*time.Second, "both messages published", func() bool { return streamCount(t, e.topo.Inbound) >= 2 })

	var limited, beats, failedBeats int
	var tokenAt []time.Time // the steady loop's requests the token's budget counts
	for _, r := range e.plat.Requests() {
		if r.Status == http.StatusTooManyRequests {
			limited++
		}
		if r.Path == "/registry/heartbeat" {
			beats++
			if r.Status != http.StatusOK {
				failedBeats++
			}
		}
		polled := r.Method == http.MethodGet && strings.HasPrefix(r.Path, "/workspaces/"+e.ws.ID+"/")
		if (polled || r.Path == "/registry/heartbeat") && r.At.After(start) { // not the start-up's reads
			tokenAt = append(tokenAt, r.At)
		}
	}
	if limited != 0 || failedBeats != 0 || beats < 4 {
		t.Fatalf("429s: %d, heartbeats: %d (%d failed)", limited, beats, failedBeats)
	}
	// Pacing spends a window's budget down to the reserve, then waits for
	// the reset (plus a second's pad: the header is whole seconds). So some
	// second holds limit − reserve of the token's requests; a poller that
	// never met the limit (polling slower than the budget) holds fewer.
	const limit, reserve = 20, 6
	busiest := busiestSecond(tokenAt)
	t.Logf("%d token requests (%d heartbeats) in %s, at most %d in one second, no 429",
		len(tokenAt), beats, time.Since(start).Round(time.Millisecond), busiest)
	if busiest < limit-reserve {
		t.Fatalf("at most %d of the token's requests in any one second, want %d (the budget down to its reserve): the limit was never reached", busiest, limit-reserve)
	}
}

// busiestSecond is the most requests of at within any one second.
func busiestSecond(at []time.Time) int {
	best, lo := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= time.Second {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// In Run, heartbeats keep their own timer, also while the workspace is
// paused and nothing is fetched.
func TestRunHeartbeatsOnItsOwnTimerWhilePaused(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	p := e.poller(poller.Config{HeartbeatInterval: 50 * time.Millisecond})
	run(t, p)
	e.waitSeeded(e.ws.ID)
	e.plat.Pause(e.ws.ID)
	waitFor(t, 10*time.Second, "pause observed", func() bool {
		st, err := p.Status(ctx(t))
		return err == nil && st[0].Paused
	})
	fetches := e.requests(http.MethodGet, "/activity")
	beats := e.plat.Status(e.ws.ID).Heartbeats
	e.sendCanvas(e.ws.ID, "while paused")
	waitFor(t, 10*time.Second, "heartbeats while paused", func() bool { return e.plat.Status(e.ws.ID).Heartbeats >= beats+3 })
	if got := e.requests(http.MethodGet, "/activity"); got != fetches {
		t.Fatalf("%d activity requests while paused", got-fetches)
	}
	if streamCount(t, e.topo.Inbound) != 0 {
		t.Fatal("published while paused")
	}
	var hb struct {
		ActiveTasks     *int           `json:"active_tasks"`
		UptimeSeconds   *int64         `json:"uptime_seconds"`
		RuntimeMetadata map[string]any `json:"runtime_metadata"`
	}
	if err := jsonUnmarshal(e.plat.Status(e.ws.ID).LastHeartbeat, &hb); err != nil || hb.ActiveTasks == nil || hb.UptimeSeconds == nil || hb.RuntimeMetadata == nil {
		t.Fatalf("heartbeat body %s: %v", e.plat.Status(e.ws.ID).LastHeartbeat, err)
	}
}

// A deleted workspace stops its own loop with a clear error; the others
// keep being polled.
func TestRunStopsRemovedWorkspaceKeepsOthers(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	b := e.plat.CreateWorkspace("agent-b")
	p := e.poller(poller.Config{Workspaces: []*molecule.Client{e.client(e.ws), e.client(b)}})
	stop := run(t, p)
	e.waitSeeded(e.ws.ID)
	e.waitSeeded(b.ID)

	e.plat.Delete(e.ws.ID)
	waitFor(t, 10*time.Second, "deleted workspace stopped", func() bool {
		st, err := p.Status(ctx(t))
		return err == nil && st[0].Stopped == poller.StoppedRemoved
	})
	polledA := e.requests("", "/workspaces/"+e.ws.ID+"/")
	e.sendCanvas(b.ID, "still here")
	waitFor(t, 10*time.Second, "the other workspace's message", func() bool { return streamCount(t, e.topo.Inbound) == 1 })
	e.sendCanvas(b.ID, "and again")
	waitFor(t, 10*time.Second, "the other workspace's second message", func() bool { return streamCount(t, e.topo.Inbound) == 2 })
	if got := e.requests("", "/workspaces/"+e.ws.ID+"/"); got != polledA {
		t.Fatalf("%d more requests for the deleted workspace after it stopped", got-polledA)
	}
	if n := e.plat.Status(e.ws.ID).Registrations; n != 1 {
		t.Fatalf("deleted workspace registered %d times", n)
	}
	err := stop()
	if !errors.Is(err, molecule.ErrWorkspaceRemoved) || !strings.Contains(err.Error(), e.ws.ID) || strings.Contains(err.Error(), b.ID) {
		t.Fatalf("Run error: %v", err)
	}
}

// A failed cycle (here the platform answers the state read 500, twice) is
// tried again within a second, not a whole poll interval later (an hour
// here; 5 s by default).
func TestFailedPollIsRetriedSoonerThanThePollInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.plat.InjectFault(moleculetest.Fault{Method: "GET", PathPrefix: "/workspaces/" + e.ws.ID + "/state", Status: 500, Count: 2})
	start := time.Now()
	run(t, e.poller(poller.Config{PollInterval: time.Hour}))
	e.waitSeeded(e.ws.ID)
	if n := e.requests("GET", "/state"); n != 3 {
		t.Fatalf("%d state reads, want the 2 that failed and the one that let the cycle go on", n)
	}
	t.Logf("seeded %s after the start, through 2 failed cycles", time.Since(start).Round(time.Millisecond))
}
