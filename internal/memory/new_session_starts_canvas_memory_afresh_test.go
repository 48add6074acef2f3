package memory_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The canvas's "New session" (SESSION_RESET on the event stream; the
// platform keeps its rows, enteros-core aeec8e47 chat_session.go:81-137)
// starts the canvas conversation afresh: the next canvas message's handler
// gets no turn from before it, the one after gets only the new session's,
// and a peer's conversation keeps its turns.
func TestNewSessionStartsCanvasMemoryAfresh(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	h := newSeenBy()
	cfg := memory.Config{Turns: memory.DefaultTurns}
	w.StartPipeline(pipelinetest.PipelineConfig{Poller: poller.Config{SSE: true}, NoDispatcher: true, NoReplier: true})
	rp := w.Proc()
	pipelinetest.Start(t, w.NewReplier(rp, nil, replier.Config{Memory: memoryOn(t, rp, cfg)}).Run)
	startDispatcher(t, w, h, cfg)
	w.WaitSeeded(w.Agent.ID)
	pipelinetest.Eventually(t, 10*time.Second, "event stream open", func() bool { return w.Requests("GET", "/events/stream", 200) > 0 })
	peerConv := "peer-" + w.Peers[0].ID

	for i := 1; i <= 2; i++ {
		w.SendCanvas(fmt.Sprintf("old %d", i))
		waitTurns(t, w, events.ConversationCanvas, 2*i)
	}
	w.SendPeer(0, "peer 1")
	waitTurns(t, w, peerConv, 2)

	if code, body, err := w.Plat.NewChatSession(pipelinetest.Ctx(t), w.Agent.ID); err != nil || code != 200 {
		t.Fatalf("new session: %d %s %v", code, body, err)
	}
	pipelinetest.Eventually(t, 10*time.Second, "the canvas conversation reset", func() bool {
		_, ok, err := memory.Read(pipelinetest.Ctx(t), w.Obs.JS, w.Obs.Topo, w.Agent.ID, events.ConversationCanvas)
		return err == nil && !ok
	})
	for i := 1; i <= 2; i++ {
		w.SendCanvas(fmt.Sprintf("new %d", i))
		waitTurns(t, w, events.ConversationCanvas, 2*i)
	}

	before := h.request(t, "old 2").History
	for i := 1; i <= 2; i++ {
		req := h.request(t, fmt.Sprintf("new %d", i))
		if got, want := texts(req.History), wantHistory("new", i); !reflect.DeepEqual(got, want) {
			t.Errorf("new %d: history %q, want %q", i, got, want)
		}
	}
	t.Logf("turns the handler saw: %d before the reset (old 2), %d after (new 1)", len(before), len(h.request(t, "new 1").History))
	if len(before) != 2 {
		t.Errorf("old 2 saw %d turns, want 2", len(before))
	}
	waitTurns(t, w, peerConv, 2)
}
