package poller_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The safety-net cadence of Run (cadence.go) at test speed: polls every
// 100 ms while the stream is not proven healthy or a message arrived
// lately, every 3 s (±10 %) otherwise; heartbeats every 2 s (so a silent
// stream is noticed after at most 2 s + 1 s of echo grace, a grace wide
// enough for a loaded machine running the race detector).
const (
	netPoll      = 100 * time.Millisecond
	netSafetyNet = 3 * time.Second
)

func safetyNetConfig() poller.Config {
	return poller.Config{
		SSE:               true,
		PollInterval:      netPoll,
		SafetyNetInterval: netSafetyNet,
		HeartbeatInterval: 2 * time.Second,
		OverlapWindow:     2 * time.Second,
		OverlapEvery:      400 * time.Millisecond,
	}
}

// activityAt lists when ws's feed was read (since_id fetches and overlap
// re-reads).
func activityAt(e *env, ws string) []time.Time {
	var at []time.Time
	for _, r := range e.plat.Requests() {
		if r.Method == http.MethodGet && r.Path == "/workspaces/"+ws+"/activity" {
			at = append(at, r.At)
		}
	}
	return at
}

func activityAfter(e *env, ws string, t time.Time) int {
	n := 0
	for _, at := range activityAt(e, ws) {
		if at.After(t) {
			n++
		}
	}
	return n
}

// waitSettled waits until Run stopped polling ws every poll interval: no
// feed read for ten poll intervals.
func waitSettled(e *env, ws string) {
	e.t.Helper()
	waitFor(e.t, 30*time.Second, "the poll to slow to the safety net", func() bool {
		at := activityAt(e, ws)
		return len(at) > 0 && time.Since(at[len(at)-1]) > 10*netPoll
	})
}

func waitPublished(t *testing.T, e *env, n int, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, within, what, func() bool { return len(e.inbound()) >= n })
	return time.Since(start)
}

// With the stream healthy (each heartbeat echoed on it) and nothing
// arriving, the feed is read every safety-net interval instead of every
// poll interval, heartbeats go on, and a message still arrives through its
// event at once and brings the fast poll back.
func TestSafetyNetPollSlowsWhileStreamEchoesHeartbeats(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	run(t, e.poller(safetyNetConfig()))
	e.waitSeeded(e.ws.ID)
	waitSettled(e, e.ws.ID)

	from := time.Now()
	beatsBefore := e.requests(http.MethodPost, "/registry/heartbeat")
	waitFor(t, 10*time.Second, "two safety-net intervals to pass", func() bool { return time.Since(from) > 2*netSafetyNet })
	reads := activityAfter(e, e.ws.ID, from)
	// Every poll interval would be 60 reads; the safety net is 2 (3 with
	// the jitter's phase).
	if reads > 3 {
		t.Fatalf("%d feed reads in %s with a healthy stream and no message; want at most 3 (one per safety-net interval)", reads, time.Since(from).Round(time.Millisecond))
	}
	if beats := e.requests(http.MethodPost, "/registry/heartbeat") - beatsBefore; beats < 2 {
		t.Fatalf("%d heartbeats in %s; the heartbeat must not slow with the poll", beats, time.Since(from).Round(time.Millisecond))
	}

	sent := time.Now()
	e.sendCanvas(e.ws.ID, "after a quiet spell")
	if d := waitPublished(t, e, 1, 2*time.Second, "the message announced on the stream to be published"); d > time.Second {
		t.Fatalf("published %s after its event; the wake-up must not wait for the safety net", d)
	}
	waitFor(t, 5*time.Second, "the poll to return to the poll interval after a message", func() bool {
		return activityAfter(e, e.ws.ID, sent) >= 5
	})
}

// A message whose event the stream dropped is found by the safety-net poll
// within 1.1 × SafetyNetInterval.
func TestSafetyNetFindsMessageWhoseEventWasDropped(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	run(t, e.poller(safetyNetConfig()))
	e.waitSeeded(e.ws.ID)
	waitSettled(e, e.ws.ID)

	e.plat.MuteEvents(e.ws.ID, true)
	e.sendCanvas(e.ws.ID, "its event is lost")
	e.plat.MuteEvents(e.ws.ID, false)
	bound := netSafetyNet*11/10 + netPoll
	d := waitPublished(t, e, 1, bound+2*time.Second, "the safety net to find the message")
	t.Logf("found by the safety net %s after it was queued (bound %s)", d.Round(time.Millisecond), bound)
	if d > bound+time.Second {
		t.Fatalf("found after %s; the documented bound is %s", d, bound)
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
}

// A stream that stays open but goes silent (no echo of a heartbeat) is
// reopened, and until it proves healthy again the feed is read every poll
// interval, so a message is found within a poll interval or so.
func TestSilentStreamIsReopenedAndPolledEveryPollInterval(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	run(t, e.poller(safetyNetConfig()))
	e.waitSeeded(e.ws.ID)
	waitSettled(e, e.ws.ID)
	streams := e.requests(http.MethodGet, "/events/stream")

	e.plat.MuteEvents(e.ws.ID, true)
	muted := time.Now()
	waitFor(t, 10*time.Second, "the silent stream to be reopened", func() bool {
		return e.requests(http.MethodGet, "/events/stream") > streams
	})
	t.Logf("reopened %s after the stream went silent", time.Since(muted).Round(time.Millisecond))
	reopened := time.Now()
	waitFor(t, 5*time.Second, "feed reads every poll interval again", func() bool {
		return activityAfter(e, e.ws.ID, reopened) >= 5
	})
	e.sendCanvas(e.ws.ID, "no event for this one either")
	if d := waitPublished(t, e, 1, 5*time.Second, "the message to be found by the fast poll"); d > time.Second {
		t.Fatalf("found after %s with a silent stream; the poll interval is %s", d, netPoll)
	}
}

// Without SSE nothing backs off: the feed is read every poll interval.
func TestWithoutSSEThePollNeverSlows(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	cfg := safetyNetConfig()
	cfg.SSE = false
	run(t, e.poller(cfg))
	e.waitSeeded(e.ws.ID)
	from := time.Now()
	waitFor(t, 10*time.Second, "a second of polling", func() bool { return time.Since(from) > time.Second })
	if n := activityAfter(e, e.ws.ID, from); n < 5 {
		t.Fatalf("%d feed reads in a second without SSE; want one per poll interval (%s)", n, netPoll)
	}
	if n := e.requests(http.MethodGet, "/events/stream"); n != 0 {
		t.Fatalf("%d event streams opened with SSE off", n)
	}
}

// A settled workspace deleted on the platform stops at once: the stream's
// WORKSPACE_REMOVED wakes the poll, whose state read meets the dead token,
// rather than the next safety-net poll minutes later.
func TestRemovalAnnouncedOnStreamStopsSettledWorkspaceAtOnce(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	cfg := safetyNetConfig()
	cfg.SafetyNetInterval = time.Minute
	p := e.poller(cfg)
	run(t, p)
	e.waitSeeded(e.ws.ID)
	waitSettled(e, e.ws.ID)

	e.plat.Delete(e.ws.ID)
	deleted := time.Now()
	waitFor(t, 10*time.Second, "the deleted workspace stopped", func() bool {
		st, err := p.Status(ctx(t))
		return err == nil && st[0].Stopped == poller.StoppedRemoved
	})
	t.Logf("stopped %s after the delete (safety net %s)", time.Since(deleted).Round(time.Millisecond), cfg.SafetyNetInterval)
}
