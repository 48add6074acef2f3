package delegate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A's handler stops waiting after its question's timeout and answers the
// canvas without B. B's answer, arriving after that, is nobody's any more:
// it goes to A's dead-letter stream with reason unawaited_answer and an
// error naming the question, never to A's handler and never silently
// dropped.
func TestE2ELateAnswerIsDeadLettered(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	release := make(chan struct{})
	w.StartPeerRelay(0, handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		<-release
		return "B: " + req.Message.Text, nil
	}))
	procA := w.Proc()
	rec := pipelinetest.NewRecorder(askingHandler(newAsker(t, w, procA), peer.ID, time.Second))
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	defer pl.Stop(t)
	pipelinetest.Start(t, w.NewDispatcher(procA, rec, dispatcher.Config{}).Run)
	w.WaitSeeded(w.Agent.ID)

	w.SendCanvas(askPrefix + "quick?")
	pipelinetest.Eventually(t, 20*time.Second, "the canvas answer without B", func() bool { return len(notifies(w)) >= 1 })
	canvas := w.SentText(askPrefix + "quick?")
	if ar := askRecord(t, w, canvas.ActivityID, 1); ar.State != events.AskAbandoned {
		t.Fatalf("ask record %+v, want abandoned after the timeout", ar)
	}
	close(release)

	var dl []string
	pipelinetest.Eventually(t, 20*time.Second, "B's late answer dead-lettered", func() bool {
		dl = dl[:0]
		for _, e := range w.DeadLetters() {
			if e.DeadLetter != nil {
				dl = append(dl, e.DeadLetter.Reason+": "+e.DeadLetter.Error)
			}
		}
		return len(dl) > 0
	})
	if len(dl) != 1 || !strings.HasPrefix(dl[0], events.ReasonUnawaitedAnswer+": ") || !strings.Contains(dl[0], "stopped waiting") {
		t.Errorf("dead letters %q, want one %s saying the handler stopped waiting", dl, events.ReasonUnawaitedAnswer)
	}
	if got := notifies(w); len(got) != 1 || got[0] != "peer did not answer" {
		t.Errorf("canvas answers %q, want only the one without B", got)
	}
	if n := len(rec.Calls()); n != 1 {
		t.Errorf("A's handler ran %d times, want 1 (the late answer is not a new message for it)", n)
	}
}
