package delegate_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// peerKinds are the stand-ins of the peers that are not relays, each
// answering "ans: <question>" the way its client does.
var peerKinds = []struct {
	name   string
	answer answerFunc
}{
	{"typescript channel", tsChannelAnswer(ansOf)},
	{"python sdk", pythonSDKAnswer(ansOf)},
	{"plain a2a agent in poll mode", plainA2AAnswer(ansOf)},
}

func ansOf(q string) string { return "ans: " + q }

// A question to a peer that answers without any metadata of ours (a new
// messageId, no in_reply_to_message_id) is answered all the same: the
// answer is matched to the question awaited from that peer, completes
// the ask, and is neither handled as a new message nor answered back.
func TestE2EDelegationAnsweredByPeersThatAreNotRelays(t *testing.T) {
	t.Parallel()
	for _, k := range peerKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
			peer := w.Peers[0]
			si := startStandIn(t, w, peer, k.answer)
			procA := w.Proc()
			rec := pipelinetest.NewRecorder(askingHandler(newAsker(t, w, procA), peer.ID, 20*time.Second))
			pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
			defer pl.Stop(t)
			pipelinetest.Start(t, w.NewDispatcher(procA, rec, dispatcher.Config{Config: stage.Config{Concurrency: 1}}).Run)
			w.WaitSeeded(w.Agent.ID)

			w.SendCanvas(askPrefix + "what is 6 x 7?")
			pipelinetest.Eventually(t, 30*time.Second, "the canvas answer", func() bool { return len(notifies(w)) >= 1 })
			if got := notifies(w); len(got) != 1 || got[0] != "peer says: ans: what is 6 x 7?" {
				t.Fatalf("canvas answers %q, want one quoting the peer (before: a 504 after the timeout)", got)
			}
			asked := w.SentText(askPrefix + "what is 6 x 7?")
			ar := askRecord(t, w, asked.ActivityID, 1)
			if ar.State != events.AskAnswered || ar.Answer == nil || ar.Answer.ActivityID == "" {
				t.Errorf("ask record %+v, want answered through A's feed", ar)
			}
			if q := si.questions(); len(q) != 1 || q[0].contextID == "" {
				t.Errorf("the peer was asked %+v, want one question with a contextId", q)
			}
			// Give a wrong path time to show: the answer handled as a new
			// message would reach the handler and be answered to the peer.
			pipelinetest.Eventually(t, 10*time.Second, "A idle", func() bool { in, _ := w.Queued(); return in == 0 })
			if n := len(rec.Calls()); n != 1 {
				t.Errorf("A's handler ran %d times, want 1 (the answer is routed, not handled)", n)
			}
			if n := questionsTo(w, peer.ID); n != 1 {
				t.Errorf("A posted to the peer %d times, want 1 (the question; the answer is not answered back)", n)
			}
			if dl := w.DeadLetters(); len(dl) != 0 {
				t.Errorf("dead letters: %+v", dl)
			}
		})
	}
}
