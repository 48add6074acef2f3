package delegate_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Two relays on one platform: a canvas user asks agent A, A's handler asks
// peer B (poll mode, its own relay and NATS) and waits; B's relay answers
// through the platform, A's dispatcher routes the answer to the waiting
// handler, and the canvas gets one final answer quoting B. A's dispatcher
// has ONE slot, held by the waiting handler: the wait gives it back
// (stage.Park), or the answer could never be fetched.
func TestE2EDelegationToPollPeerWithOneDispatcherSlot(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	roles := make(chan string, 1)
	w.StartPeerRelay(0, peerAgent(roles))

	procA := w.Proc()
	rec := pipelinetest.NewRecorder(askingHandler(newAsker(t, w, procA), peer.ID, 20*time.Second))
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	defer pl.Stop(t)
	d := w.NewDispatcher(procA, rec, dispatcher.Config{Config: stage.Config{Concurrency: 1}})
	pipelinetest.Start(t, d.Run)
	w.WaitSeeded(w.Agent.ID)

	w.SendCanvas(askPrefix + "what is 6 x 7?")
	pipelinetest.Eventually(t, 30*time.Second, "the canvas answer", func() bool { return len(notifies(w)) >= 1 })

	if got := notifies(w); len(got) != 1 || got[0] != "peer says: B: what is 6 x 7?" {
		t.Fatalf("canvas answers %q, want one quoting B", got)
	}
	if r := <-roles; r != "user 1" {
		t.Errorf("B was asked with role and hops %q, want \"user 1\" (a relay drops role agent as an answer; hops bound chains of asks)", r)
	}
	asked := w.SentText(askPrefix + "what is 6 x 7?")
	ar := askRecord(t, w, asked.ActivityID, 1)
	if ar.State != events.AskAnswered || ar.Answer == nil || ar.Answer.ActivityID == "" || ar.SentAt.IsZero() {
		t.Errorf("ask record %+v, want answered through A's feed", ar)
	}
	if n := questionsTo(w, peer.ID); n != 1 {
		t.Errorf("A asked B %d times, want 1", n)
	}
	// The answer went to the waiting handler, never to a handler run of
	// its own; nothing was dead-lettered.
	if n := len(rec.Calls()); n != 1 {
		t.Errorf("A's handler ran %d times, want 1 (B's answer is routed, not handled)", n)
	}
	if dl := w.DeadLetters(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}
