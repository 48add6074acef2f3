package memory_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// seenBy is a handler that answers "re: <text>" and keeps what it was
// given for each message text.
type seenBy struct {
	mu   sync.Mutex
	reqs map[string]handler.Request
}

func newSeenBy() *seenBy { return &seenBy{reqs: map[string]handler.Request{}} }

func (s *seenBy) Handle(_ context.Context, req *handler.Request) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[req.Message.Text] = *req
	return "re: " + req.Message.Text, nil
}

func (s *seenBy) request(t *testing.T, text string) handler.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.reqs[text]
	if !ok {
		t.Fatalf("the handler never saw %q", text)
	}
	return r
}

// memoryOn builds the store of a process, as relay.Runtime does.
func memoryOn(t testing.TB, p *pipelinetest.Proc, cfg memory.Config) *memory.Store {
	t.Helper()
	s, err := memory.New(p.JS, p.Topo, cfg)
	if err != nil {
		t.Fatalf("memory.New: %v", err)
	}
	return s
}

// startStages runs a poller, and a dispatcher and a replier with memory
// on, each its own process; it returns the dispatcher's run and process.
func startStages(t *testing.T, w *pipelinetest.World, h handler.Handler, cfg memory.Config) (*pipelinetest.Running, *pipelinetest.Proc) {
	t.Helper()
	w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true, NoReplier: true})
	rp := w.Proc()
	pipelinetest.Start(t, w.NewReplier(rp, nil, replier.Config{Memory: memoryOn(t, rp, cfg)}).Run)
	run, dp := startDispatcher(t, w, h, cfg)
	w.WaitSeeded(w.Agent.ID)
	return run, dp
}

func startDispatcher(t *testing.T, w *pipelinetest.World, h handler.Handler, cfg memory.Config) (*pipelinetest.Running, *pipelinetest.Proc) {
	t.Helper()
	dp := w.Proc()
	return pipelinetest.Start(t, w.NewDispatcher(dp, h, dispatcher.Config{Memory: memoryOn(t, dp, cfg)}).Run), dp
}

// waitTurns waits until a conversation holds n turns.
func waitTurns(t *testing.T, w *pipelinetest.World, conv string, n int) []handler.Turn {
	t.Helper()
	var turns []handler.Turn
	pipelinetest.Eventually(t, 20*time.Second, fmt.Sprintf("%d turns in %s", n, conv), func() bool {
		var err error
		turns, _, err = memory.Read(pipelinetest.Ctx(t), w.Obs.JS, w.Obs.Topo, w.Agent.ID, conv)
		return err == nil && len(turns) >= n
	})
	if len(turns) != n {
		t.Fatalf("%s holds %d turns, want %d: %+v", conv, len(turns), n, turns)
	}
	return turns
}

func texts(turns []handler.Turn) []string {
	out := []string{}
	for _, t := range turns {
		out = append(out, t.Role+":"+t.Text)
	}
	return out
}

// wantHistory is the history of turn i (1-based) of a conversation whose
// messages are prefix 1, prefix 2, ...
func wantHistory(prefix string, i int) []string {
	out := []string{}
	for k := 1; k < i; k++ {
		msg := fmt.Sprintf("%s %d", prefix, k)
		out = append(out, "user:"+msg, "agent:re: "+msg)
	}
	return out
}

// Five turns with a canvas user and five with a peer, interleaved, with
// the dispatcher stopped and a new one started after the third: every
// handler run sees exactly the earlier turns of its own conversation.
func TestE2EMemoryAcrossFiveTurnsCanvasAndPeerApart(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	h := newSeenBy()
	cfg := memory.Config{Turns: memory.DefaultTurns}
	run, proc := startStages(t, w, h, cfg)
	peerConv := "peer-" + w.Peers[0].ID
	for i := 1; i <= 5; i++ {
		if i == 4 {
			if err := run.Stop(); err != nil {
				t.Fatalf("dispatcher stop: %v", err)
			}
			proc.Kill()
			run, proc = startDispatcher(t, w, h, cfg)
		}
		w.SendCanvas(fmt.Sprintf("canvas %d", i))
		waitTurns(t, w, events.ConversationCanvas, 2*i)
		w.SendPeer(0, fmt.Sprintf("peer %d", i))
		waitTurns(t, w, peerConv, 2*i)
	}
	for i := 1; i <= 5; i++ {
		for _, c := range []struct{ prefix, conv string }{{"canvas", events.ConversationCanvas}, {"peer", peerConv}} {
			req := h.request(t, fmt.Sprintf("%s %d", c.prefix, i))
			if got, want := texts(req.History), wantHistory(c.prefix, i); req.Conversation != c.conv || !reflect.DeepEqual(got, want) {
				t.Errorf("%s %d: conversation %q history %q\nwant %q %q", c.prefix, i, req.Conversation, got, c.conv, want)
			}
		}
	}
	turns := waitTurns(t, w, events.ConversationCanvas, 10)
	if sent := w.SentText("canvas 5"); turns[8].ActivityID != sent.ActivityID || turns[9].ActivityID != sent.ActivityID {
		t.Errorf("last canvas turns carry activities %s, %s; want %s", turns[8].ActivityID, turns[9].ActivityID, sent.ActivityID)
	}
}

// The canvas sends its own chat (params.metadata.history) with every
// message: it seeds a conversation the relay has no turns of, and the
// stored turns win afterwards.
func TestE2EPlatformHistorySeedsEmptyConversation(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	h := newSeenBy()
	startStages(t, w, h, memory.Config{Turns: memory.DefaultTurns})
	send := func(text, history string) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"1","method":"message/send","params":{"message":{"role":"user","messageId":%q,"parts":[{"kind":"text","text":%q}]},"metadata":{"history":%s}}}`,
			"m-"+text, text, history)
		if st, b, err := w.Plat.SendRaw(pipelinetest.Ctx(t), w.Agent.ID, w.Plat.CanvasHeader(), []byte(body)); err != nil || st != http.StatusOK {
			t.Fatalf("send: %d %s %v", st, b, err)
		}
	}
	canvasChat := `[{"role":"user","parts":[{"kind":"text","text":"earlier question"}]},{"role":"agent","parts":[{"kind":"text","text":"earlier answer"}]},{"role":"system"},42]`
	send("first", canvasChat)
	waitTurns(t, w, events.ConversationCanvas, 4)
	send("second", `[{"role":"user","parts":[{"kind":"text","text":"something else"}]}]`)
	waitTurns(t, w, events.ConversationCanvas, 6)

	if got, want := texts(h.request(t, "first").History), []string{"user:earlier question", "agent:earlier answer"}; !reflect.DeepEqual(got, want) {
		t.Errorf("first message's history %q, want the canvas's %q", got, want)
	}
	want := []string{"user:earlier question", "agent:earlier answer", "user:first", "agent:re: first"}
	if got := texts(h.request(t, "second").History); !reflect.DeepEqual(got, want) {
		t.Errorf("second message's history %q, want the stored %q", got, want)
	}
}
