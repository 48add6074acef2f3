package memory_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// quietOrEcho answers "re: <text>", or nothing to a text starting "quiet".
var quietOrEcho = handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
	if strings.HasPrefix(req.Message.Text, "quiet") {
		return "", nil
	}
	return "re: " + req.Message.Text, nil
})

// A message and its reply published again (as a redelivery after a lost
// ack, or an operator's replay, brings them back) find their handled and
// sent records, and the turns already recorded are not added twice: for a
// replied message (recorded by the replier) and for one without a reply
// (recorded by the dispatcher).
func TestReplayedMessagesAndRepliesDoNotDuplicateTurns(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cfg := memory.Config{Turns: memory.DefaultTurns}
	w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true, NoReplier: true})
	dp, rp := w.Proc(), w.Proc()
	d := w.NewDispatcher(dp, quietOrEcho, dispatcher.Config{Memory: memoryOn(t, dp, cfg)})
	r := w.NewReplier(rp, nil, replier.Config{Memory: memoryOn(t, rp, cfg)})
	pipelinetest.Start(t, d.Run)
	pipelinetest.Start(t, r.Run)
	w.WaitSeeded(w.Agent.ID)

	w.SendCanvas("hello")
	waitTurns(t, w, events.ConversationCanvas, 2)
	w.SendCanvas("quiet please")
	waitTurns(t, w, events.ConversationCanvas, 3)

	for _, text := range []string{"hello", "quiet please"} {
		republishInbound(t, w, w.SentText(text))
	}
	republishReply(t, w, w.SentText("hello"))
	pipelinetest.Eventually(t, 20*time.Second, "both inbound copies and the reply copy handled as duplicates", func() bool {
		in, rep := w.Queued()
		return d.Stats().Duplicates >= 2 && r.Stats().Duplicates >= 1 && in == 0 && rep == 0
	})
	turns := waitTurns(t, w, events.ConversationCanvas, 3)
	want := []string{"user:hello", "agent:re: hello", "user:quiet please"}
	if got := texts(turns); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("turns after the replays %q, want %q", got, want)
	}
	if e := d.Stats().MemoryErrors + r.Stats().MemoryErrors; e != 0 {
		t.Errorf("%d memory errors", e)
	}
}

// republishInbound publishes the inbound envelope of a sent message again
// under a new message id (the stream's duplicate window would drop the
// original id).
func republishInbound(t *testing.T, w *pipelinetest.World, s pipelinetest.Sent) {
	t.Helper()
	for _, raw := range w.Plat.Rows(w.Agent.ID) {
		m, err := molecule.ParseRow(raw, w.Agent.ID)
		if err != nil || m.ActivityID != s.ActivityID {
			continue
		}
		data, err := events.NewInbound(w.Agent.ID, m, time.Now()).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		publish(t, w, events.InboundSubject(w.Agent.ID), "replay:"+s.ActivityID, data)
		return
	}
	t.Fatalf("no row %s", s.ActivityID)
}

// republishReply publishes the recorded reply to a sent message again.
func republishReply(t *testing.T, w *pipelinetest.World, s pipelinetest.Sent) {
	t.Helper()
	entry, err := w.Obs.Topo.Handled.Get(pipelinetest.Ctx(t), events.HandledKey(w.Agent.ID, s.ActivityID))
	if err != nil {
		t.Fatal(err)
	}
	var rec events.HandledRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil || len(rec.Reply) == 0 {
		t.Fatalf("handled record %s: %v", entry.Value(), err)
	}
	publish(t, w, events.ReplySubject(w.Agent.ID), "replay-reply:"+s.ActivityID, rec.Reply)
}

func publish(t *testing.T, w *pipelinetest.World, subject, id string, data []byte) {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := w.Obs.JS.PublishMsg(pipelinetest.Ctx(t), m); err != nil {
		t.Fatal(err)
	}
}
