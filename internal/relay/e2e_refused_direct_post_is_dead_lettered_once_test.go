package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// refuseNotifies makes the platform refuse every notify of the agent for
// good (403 talk_to_user_disabled) until ClearFaults.
func refuseNotifies(w *pipelinetest.World) {
	w.Plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + w.Agent.ID + "/notify",
		Status: http.StatusForbidden, Body: `{"error":"talk_to_user_disabled"}`})
}

// notifyPosts is how many notifies of the agent the platform received,
// refused ones included.
func notifyPosts(w *pipelinetest.World) int {
	n := 0
	for _, r := range w.Plat.Requests() {
		if r.Method == http.MethodPost && r.Path == "/workspaces/"+w.Agent.ID+"/notify" {
			n++
		}
	}
	return n
}

// checkRefusalDeadLetter checks that the dead-letter stream holds one
// dead letter, the replier's permanent refusal of text's reply, and
// returns it.
func checkRefusalDeadLetter(t *testing.T, w *pipelinetest.World, text string) dlq.Entry {
	t.Helper()
	dead := w.DeadLetters()
	if len(dead) != 1 {
		t.Fatalf("dead letters: %d, want 1: %+v", len(dead), dead)
	}
	dl := dead[0].DeadLetter
	if dl == nil || dl.Stage != events.StageReplier || dl.Reason != events.ReasonPermanent ||
		dl.ActivityID != w.SentText(text).ActivityID || dl.OriginalSubject != events.ReplySubject(w.Agent.ID) ||
		!strings.Contains(dl.Error, "talk_to_user_disabled") || !strings.Contains(dl.Error, "replay this dead letter") {
		t.Fatalf("dead letter %+v: want the replier's permanent refusal of %q's reply, saying what to do", dl, text)
	}
	rep, err := events.DecodeReply(dl.Envelope)
	if err != nil || rep.Text != "echo: "+text {
		t.Fatalf("dead letter's envelope %s (%v): want the reply", dl.Envelope, err)
	}
	return dead[0]
}

// A canvas reply the platform refuses for good (403) on its direct post
// is posted once and dead-lettered once, from the direct path: it never
// reaches the reply stream, whose replier would post it again and be
// refused again. The dead letter is the replier's, replayable as one: its
// replay, once the cause is fixed, posts the reply through the stream.
func TestE2ERefusedDirectPostIsPostedOnceAndDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	refuseNotifies(w)
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Direct: true})
	w.WaitSeeded(w.Agent.ID)
	const text = "refused for good"
	w.SendCanvas(text)
	pipelinetest.Eventually(t, 20*time.Second, "the refused reply's dead letter", func() bool { return len(w.DeadLetters()) > 0 })
	waitDrained(t, w, 10*time.Second)

	dead := checkRefusalDeadLetter(t, w, text)
	if dl := dead.DeadLetter; dl.Deliveries != 1 || dl.OriginalStream != events.StreamReply || dl.OriginalSeq != 0 {
		t.Errorf("dead letter %+v: want the stream's first delivery's, without a stream sequence", dl)
	}
	if n := notifyPosts(w); n != 1 {
		t.Errorf("the platform received %d notifies, want 1: a refused direct post is not posted again", n)
	}
	if got := w.StreamMsgs(w.Obs.Topo.Reply); got != 0 || replyStreamReceived(t, w) != 0 {
		t.Errorf("reply stream holds %d, received %d: want nothing, the refusal ends on the direct path", got, replyStreamReceived(t, w))
	}
	if rec := handledRecord(t, w, w.SentText(text).ActivityID); rec.ReplyRefused == nil || rec.ReplyRefused.Reason != events.ReasonPermanent {
		t.Errorf("handled record %+v: want the refusal recorded", rec)
	}
	if st := pl.Replier.Stats(); st.DirectRefused != 1 || st.DeadLettered != 1 || st.DirectFallbacks != 0 || st.Direct != 0 {
		t.Errorf("replier stats %+v: want one direct refusal, dead-lettered and counted", st)
	}
	if got := pl.Recorder.Deliveries(w.SentText(text).ActivityID); fmt.Sprint(got) != "[1]" {
		t.Errorf("handler deliveries %v, want [1]", got)
	}

	// Fixed on the platform: the replay posts the reply, through the
	// stream's replier.
	w.Plat.ClearFaults()
	if err := dlq.Replay(pipelinetest.Ctx(t), w.Obs.JS, dead.Seq); err != nil {
		t.Fatal(err)
	}
	w.WaitReplies(1, 20*time.Second)
	waitDrained(t, w, 10*time.Second)
	pl.Stop(t)
	w.CheckExactlyOnce(t, w.Sent())
	if n := len(w.DeadLetters()); n != 0 {
		t.Errorf("%d dead letters left after the replay", n)
	}
	if n := notifyPosts(w); n != 2 {
		t.Errorf("the platform received %d notifies, want 2: the refused one and the replay's", n)
	}
}

// replyStreamReceived is how many messages the reply stream ever received.
func replyStreamReceived(t *testing.T, w *pipelinetest.World) uint64 {
	t.Helper()
	info, err := w.Obs.Topo.Reply.Info(pipelinetest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// handledRecord reads the handled record of the agent's activity.
func handledRecord(t *testing.T, w *pipelinetest.World, activity string) events.HandledRecord {
	t.Helper()
	entry, err := w.Obs.Topo.Handled.Get(pipelinetest.Ctx(t), events.HandledKey(w.Agent.ID, activity))
	if err != nil {
		t.Fatal(err)
	}
	var rec events.HandledRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// A process whose direct post the platform refused for good, killed on
// the way to the refusal's dead letter. The redelivery of the inbound
// message never loses the dead letter and writes it once:
//   - killed after the refusal, before it is recorded: nothing durable
//     says the POST was refused (the platform keeps no row of a refused
//     notify), so the redelivery does what a crash after any POST does:
//     it writes the posting record from the mark, republishes the reply,
//     and the stream's replier, finding nothing on the feed, posts it
//     again. The platform sees the refused post twice; the stream's
//     replier dead-letters it: one dead letter.
//   - killed after the refusal is recorded in the handled record, before
//     or after the dead letter: the redelivery writes the dead letter (a
//     second write within the duplicate window is dropped by its
//     Nats-Msg-Id) and posts nothing, whether a replier shares its
//     process or not.
func TestE2ECrashRefusedDirectPost(t *testing.T) {
	t.Parallel()
	type hook = func(context.Context, *events.Inbound) error
	at := func(set func(*crashpoint.Dispatcher, hook)) func(func() error) *crashpoint.Dispatcher {
		return func(kill func() error) *crashpoint.Dispatcher {
			h := &crashpoint.Dispatcher{}
			set(h, func(_ context.Context, m *events.Inbound) error {
				if m.Text != "crash me" {
					return nil
				}
				return kill()
			})
			return h
		}
	}
	afterRecord := at(func(h *crashpoint.Dispatcher, f hook) { h.AfterRefusalRecord = f })
	for _, p := range []struct {
		name  string
		hooks func(kill func() error) *crashpoint.Dispatcher
		// alone: the redelivery reaches a dispatcher without a replier.
		alone bool
		// posts is how many notifies the platform receives; streamed is
		// how many replies the reply stream receives.
		posts, streamed int
	}{
		{"after the refusal, before it is recorded", at(func(h *crashpoint.Dispatcher, f hook) { h.AfterDirectPost = f }), false, 2, 1},
		{"after the refusal is recorded, before its dead letter", afterRecord, false, 1, 0},
		{"after the refusal is recorded, before its dead letter, redelivered to a dispatcher run alone", afterRecord, true, 1, 0},
		{"after the dead letter, before the inbound ack", at(func(h *crashpoint.Dispatcher, f hook) { h.AfterRefusalDeadLetter = f }), false, 1, 0},
	} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			testCrashRefusedDirectPost(t, p.hooks, p.alone, p.posts, uint64(p.streamed))
		})
	}
}

func testCrashRefusedDirectPost(t *testing.T, hooks func(kill func() error) *crashpoint.Dispatcher, alone bool, posts int, streamed uint64) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	refuseNotifies(w)
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	rec := pipelinetest.NewRecorder(nil)
	crashDirectPoster(t, w, rec, hooks, "the crash on the way to the dead letter")

	// The next process: its dispatcher gets the redelivery.
	proc2 := w.Proc()
	cfg := dispatcher.Config{}
	if !alone {
		cfg.Direct = w.NewReplier(proc2, nil, replier.Config{})
	}
	d2 := w.NewDispatcher(proc2, rec, cfg)
	run2 := pipelinetest.Start(t, d2.Run)
	pipelinetest.Eventually(t, 20*time.Second, "the refused reply's dead letter", func() bool { return len(w.DeadLetters()) > 0 })
	waitDrained(t, w, 15*time.Second)
	if err := run2.Stop(); err != nil {
		t.Errorf("second dispatcher: %v", err)
	}
	pl.Stop(t)

	checkRefusalDeadLetter(t, w, "crash me")
	if n := notifyPosts(w); n != posts {
		t.Errorf("the platform received %d notifies, want %d", n, posts)
	}
	if got := replyStreamReceived(t, w); got != streamed {
		t.Errorf("reply stream received %d replies, want %d", got, streamed)
	}
	if got := rec.Deliveries(w.SentText("crash me").ActivityID); fmt.Sprint(got) != "[1]" {
		t.Errorf("handler deliveries %v, want [1]: the redelivery must find the handled record", got)
	}
	if got := d2.Stats().Duplicates; got != 1 {
		t.Errorf("second dispatcher duplicates = %d, want 1 (the redelivered message)", got)
	}
}
