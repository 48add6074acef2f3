package delegate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The asking dispatcher dies (its NATS connection closed and its run
// cancelled, as in pkg/relay's crash tests) while its handler waits for
// B; B answers only after the death. The redelivered message re-runs the
// handler, which asks its first question again under the same messageId,
// finds the question sent (or already answered: the answer may be routed
// before the redelivery) and does not send it again; the canvas gets
// exactly one final answer.
func TestE2EDelegatedAnswerReachesHandlerRerunAfterAskerKilled(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	asked := make(chan struct{})
	release := make(chan struct{})
	w.StartPeerRelay(0, handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		close(asked) // B is asked once: a second call panics the test
		<-release
		return "B: " + req.Message.Text, nil
	}))
	rerunAfterAskerKilled(t, w, peer, asked, release)
}

// rerunAfterAskerKilled is the crash both tests above make: the asking
// process dies while its handler waits for the peer (asked closes when the
// peer is asked); the peer answers once release is closed, with no asking
// process alive; a new one re-runs the handler, which gets that answer
// without asking again, and the canvas gets exactly one final answer.
func rerunAfterAskerKilled(t *testing.T, w *pipelinetest.World, peer moleculetest.Workspace, asked, release chan struct{}) {
	t.Helper()
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	defer pl.Stop(t)

	// First asking process: its handler's wait ends when the process dies.
	proc1 := w.Proc()
	died := make(chan struct{})
	first := askingHandler(newAsker(t, w, proc1), peer.ID, 30*time.Second)
	rec := pipelinetest.NewRecorder(handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-died:
				cancel()
			case <-ctx.Done():
			}
		}()
		return first(ctx, req)
	}))
	run1 := pipelinetest.Start(t, w.NewDispatcher(proc1, rec, dispatcher.Config{}).Run)
	w.WaitSeeded(w.Agent.ID)
	w.SendCanvas(askPrefix + "still there?")
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("B was never asked")
	}
	// While it waits: once the question is recorded sent. A death between
	// the platform's acceptance and that record is another row of
	// docs/delegation.md (the re-run sends the question again).
	pipelinetest.Eventually(t, 10*time.Second, "the question recorded sent", func() bool { return questionsRecordedSent(t, w) })
	proc1.Kill()
	run1.Cancel()
	close(died)
	<-run1.Done()

	// B answers now, with no asking process alive; then a new one starts.
	close(release)
	canvas := w.SentText(askPrefix + "still there?")
	pipelinetest.Eventually(t, 20*time.Second, "B's answer on A's feed", func() bool {
		for _, s := range w.Sent() {
			if s.From == peer.ID {
				return true
			}
		}
		return false
	})
	proc2 := w.Proc()
	rec2 := pipelinetest.NewRecorder(askingHandler(newAsker(t, w, proc2), peer.ID, 30*time.Second))
	pipelinetest.Start(t, w.NewDispatcher(proc2, rec2, dispatcher.Config{}).Run)

	pipelinetest.Eventually(t, 30*time.Second, "the canvas answer", func() bool { return len(notifies(w)) >= 1 })
	pipelinetest.Eventually(t, 10*time.Second, "A's inbound drained", func() bool {
		in, _ := w.Queued()
		return in == 0
	})
	if got := notifies(w); len(got) != 1 || got[0] != "peer says: B: still there?" {
		t.Fatalf("canvas answers %q, want exactly one quoting B", got)
	}
	if n := questionsTo(w, peer.ID); n != 1 {
		t.Errorf("A asked B %d times, want 1 (the re-run must not ask again)", n)
	}
	if got := fmt.Sprint(rec2.Deliveries(canvas.ActivityID)); got != "[2]" {
		t.Errorf("re-run deliveries %s, want [2]", got)
	}
	if ar := askRecord(t, w, canvas.ActivityID, 1); ar.State != events.AskAnswered {
		t.Errorf("ask record %+v, want answered", ar)
	}
	if dl := w.DeadLetters(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}

// questionsRecordedSent reports whether every ask record of the world
// holds its sent time.
func questionsRecordedSent(t *testing.T, w *pipelinetest.World) bool {
	ctx := pipelinetest.Ctx(t)
	keys, err := w.Obs.Topo.Asks.ListKeys(ctx)
	if err != nil {
		return false
	}
	n := 0
	for k := range keys.Keys() {
		if !strings.Contains(k, ".ask.") {
			continue
		}
		e, err := w.Obs.Topo.Asks.Get(ctx, k)
		var rec struct {
			SentAt time.Time `json:"sent_at"`
		}
		if err != nil || json.Unmarshal(e.Value(), &rec) != nil || rec.SentAt.IsZero() {
			return false
		}
		n++
	}
	return n > 0
}
