package relay_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A dead letter of a message whose canvas reply was already posted
// directly, replayed: the handler runs again (the replay deletes the
// handled record), but its reply goes through the reply stream, whose
// replier finds the reply record sent and does not post it again. (A
// marked direct post reads no reply record before its POST, so a replay
// posted directly would notify the canvas a second time.)
func TestE2EReplayOfADirectlyPostedMessagePostsNoSecondReply(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)
	// The inbound envelope as the poller publishes it, for the dead letter.
	published, err := w.Obs.NC.SubscribeSync(events.InboundSubject(w.Agent.ID))
	if err != nil {
		t.Fatal(err)
	}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Direct: true})
	w.WaitSeeded(w.Agent.ID)
	const text = "posted, then dead-lettered"
	w.SendCanvas(text)
	w.WaitReplies(1, 20*time.Second)
	waitDrained(t, w, 10*time.Second)
	in, err := published.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the inbound envelope was not seen: %v", err)
	}
	if st := pl.Replier.Stats(); st.Direct != 1 {
		t.Fatalf("replier stats %+v: want the reply posted directly", st)
	}

	// As if every later delivery of it had failed until the sweep.
	sent := w.SentText(text)
	dl := events.DeadLetter{V: 1, Stage: events.StageDispatcher, WorkspaceID: w.Agent.ID, ActivityID: sent.ActivityID,
		Reason: events.ReasonMaxDeliveries, Deliveries: 5, OriginalSubject: in.Subject, OriginalStream: events.StreamInbound,
		OriginalSeq: 1, Envelope: in.Data}
	if err := dlq.Publish(ctx, w.Obs.JS, dl); err != nil {
		t.Fatal(err)
	}
	dead := w.DeadLetters()
	if len(dead) != 1 {
		t.Fatalf("dead letters: %+v, want the one published", dead)
	}
	if err := dlq.Replay(ctx, w.Obs.JS, dead[0].Seq); err != nil {
		t.Fatal(err)
	}
	pipelinetest.Eventually(t, 20*time.Second, "the replayed message handled again", func() bool {
		return pl.Dispatcher.Stats().Replied == 2
	})
	waitDrained(t, w, 10*time.Second)
	pipelinetest.Eventually(t, 10*time.Second, "the replier's delivery of the replayed reply", func() bool {
		return pl.Replier.Stats().Received == 1
	})
	pl.Stop(t)
	w.CheckExactlyOnce(t, w.Sent())
	if st := pl.Replier.Stats(); st.Direct != 1 || st.Notified != 1 {
		t.Errorf("replier stats %+v: want one notify, the first, posted directly", st)
	}
}
