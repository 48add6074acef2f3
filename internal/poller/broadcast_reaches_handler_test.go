package poller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// broadcastWorld is the pipeline with an announcer in the agent's org
// (a child of it: the platform's org is the parent_id tree) that may
// broadcast.
func broadcastWorld(t *testing.T, cfg poller.Config) (*pipelinetest.World, *pipelinetest.Pipeline, moleculetest.Workspace, <-chan events.Inbound) {
	t.Helper()
	w := pipelinetest.New(t, pipelinetest.Options{})
	announcer := w.Plat.CreateChild(w.Agent.ID, "announcer")
	w.Plat.SetBroadcastEnabled(announcer.ID, true)
	seen := make(chan events.Inbound, 16)
	h := handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
		seen <- *req.Message
		return "thanks: " + req.Message.Text, nil // an answer the relay must not send
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Poller: cfg, Handler: h, Direct: true})
	t.Cleanup(func() { pl.Stop(t) })
	w.WaitSeeded(w.Agent.ID)
	return w, pl, announcer, seen
}

// broadcast sends text from announcer and returns when it was sent.
func broadcast(t *testing.T, w *pipelinetest.World, announcer moleculetest.Workspace, text string) time.Time {
	t.Helper()
	sent := time.Now()
	code, body, err := w.Plat.Broadcast(pipelinetest.Ctx(t), announcer, text)
	if err != nil || code != 200 || !strings.Contains(string(body), `"delivered":1`) {
		t.Fatalf("broadcast: %d %s %v", code, body, err)
	}
	return sent
}

// broadcastReads counts the broadcast reads the double has answered.
func broadcastReads(w *pipelinetest.World) int {
	n := 0
	for _, r := range w.Plat.Requests() {
		if strings.HasSuffix(r.Path, "/activity") && strings.Contains(r.Query, "type=broadcast_receive") && r.Status != 0 {
			n++
		}
	}
	return n
}

// handledBroadcast waits for the handler's call of a broadcast and
// returns its message.
func handledBroadcast(t *testing.T, seen <-chan events.Inbound, within time.Duration) events.Inbound {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case in := <-seen:
			if in.Kind == events.KindBroadcast {
				return in
			}
		case <-deadline:
			t.Fatalf("no broadcast reached the handler within %s", within)
		}
	}
}

// A broadcast reaches the handler marked as one (kind "broadcast", from
// the announcer as a peer, its summary as text) within moments of its
// POST when the event stream announces it, though the safety net and the
// broadcast interval are an hour; and the relay answers it to no one.
func TestBroadcastReachesHandlerMarkedAndUnanswered(t *testing.T) {
	w, pl, announcer, seen := broadcastWorld(t, poller.Config{SSE: true, SafetyNetInterval: time.Hour, BroadcastInterval: time.Hour})
	pipelinetest.Eventually(t, 10*time.Second, "event stream open", func() bool { return w.Requests("GET", "/events/stream", 200) > 0 })
	sent := broadcast(t, w, announcer, "maintenance at 05:00")
	in := handledBroadcast(t, seen, 5*time.Second)
	t.Logf("broadcast POST to handler: %s", time.Since(sent).Round(time.Millisecond))
	if in.Source != events.SourcePeerAgent || in.SourceWorkspaceID != announcer.ID || in.Text != "Broadcast from announcer: maintenance at 05:00" {
		t.Errorf("handler got %+v", in)
	}
	pipelinetest.Eventually(t, 5*time.Second, "the broadcast handled", func() bool { return pl.Dispatcher.Stats().Skipped == 1 })
	if n := w.Requests("POST", "/workspaces/"+announcer.ID+"/a2a", 0); n != 0 {
		t.Errorf("the relay answered the broadcast: %d POSTs to the announcer", n)
	}
	if n := len(w.Plat.Notifications(w.Agent.ID)); n != 0 {
		t.Errorf("the relay answered the broadcast on the canvas: %d notifies", n)
	}
}

// Without the event stream a broadcast is read by the next cycle after
// BroadcastInterval, not on every poll: an idle workspace adds one
// request per interval.
func TestBroadcastWithoutEventStreamIsReadOncePerInterval(t *testing.T) {
	const interval = 700 * time.Millisecond
	w, _, announcer, seen := broadcastWorld(t, poller.Config{PollInterval: 50 * time.Millisecond, BroadcastInterval: interval})
	reads := func() int { return broadcastReads(w) }
	start, before := time.Now(), reads()
	sent := broadcast(t, w, announcer, "hello org")
	handledBroadcast(t, seen, 6*interval)
	t.Logf("broadcast POST to handler without events: %s (interval %s)", time.Since(sent).Round(time.Millisecond), interval)
	time.Sleep(3 * interval) // a span of idle polls to count the reads in
	span := time.Since(start)
	polls := w.Requests("GET", "/workspaces/"+w.Agent.ID+"/activity", 0)
	// +2: the first read, and the second brought forward by the phase.
	if got, most := reads()-before, int(span/interval)+2; got > most || got == 0 {
		t.Errorf("%d broadcast reads in %s (interval %s), want 1..%d; %d activity reads in all", got, span.Round(time.Millisecond), interval, most, polls)
	}
}

// A broadcast from before the relay first polled (and registered) the
// workspace is old backlog: with BacklogWindow 0 the first read only sets
// the broadcast cursor, and the next broadcast is delivered alone.
func TestBroadcastBeforeFirstPollIsBacklog(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	announcer := w.Plat.CreateChild(w.Agent.ID, "announcer")
	w.Plat.SetBroadcastEnabled(announcer.ID, true)
	broadcast(t, w, announcer, "old news")
	seen := make(chan events.Inbound, 16)
	h := handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
		seen <- *req.Message
		return "", nil
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Poller: poller.Config{SSE: true}, Handler: h, Direct: true})
	t.Cleanup(func() { pl.Stop(t) })
	w.WaitSeeded(w.Agent.ID)
	pipelinetest.Eventually(t, 10*time.Second, "event stream open", func() bool { return w.Requests("GET", "/events/stream", 200) > 0 })
	broadcast(t, w, announcer, "new news")
	if in := handledBroadcast(t, seen, 5*time.Second); in.Text != "Broadcast from announcer: new news" {
		t.Errorf("first broadcast handled: %q, want the new one", in.Text)
	}
}

// The row cuts a message at 120 runes; the event carries it whole, and
// the handler gets it whole when the event was seen, the row's summary
// when it was missed (workspace_broadcast.go:145-161). The first world
// reads broadcasts only on their event (an interval of an hour), so its
// row is never read before its event; the second never sees an event.
func TestLongBroadcastReachesHandlerWholeWhenItsEventWasSeen(t *testing.T) {
	t.Run("event seen", func(t *testing.T) {
		w, _, announcer, seen := broadcastWorld(t, poller.Config{SSE: true, BroadcastInterval: time.Hour})
		pipelinetest.Eventually(t, 10*time.Second, "event stream open", func() bool { return w.Requests("GET", "/events/stream", 200) > 0 })
		// The first cycle's broadcast read (due at once) would otherwise
		// race the POST: a row it reads before the event lands keeps its
		// summary, which is the "event missed" case below.
		pipelinetest.Eventually(t, 10*time.Second, "first broadcast read answered", func() bool { return broadcastReads(w) > 0 })
		long := strings.Repeat("seen ", 40) // 200 runes
		broadcast(t, w, announcer, long)
		if in := handledBroadcast(t, seen, 5*time.Second); in.Text != "Broadcast from announcer: "+long {
			t.Errorf("with its event: text %q", in.Text)
		}
	})
	t.Run("event missed", func(t *testing.T) {
		w, _, announcer, seen := broadcastWorld(t, poller.Config{SSE: true, BroadcastInterval: 500 * time.Millisecond})
		w.Plat.MuteEvents(w.Agent.ID, true)
		long := strings.Repeat("miss ", 40)
		broadcast(t, w, announcer, long)
		if in := handledBroadcast(t, seen, 10*time.Second); in.Text != "Broadcast from announcer: "+long[:120]+"…" {
			t.Errorf("without its event: text %q", in.Text)
		}
	})
}
