package delegate_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Route against real buckets: which inbound messages are answers, which
// are stored, which are duplicates of a stored answer, and which are
// nobody's any more (the asking message finished while the question was
// pending, or another answer came first).
func TestRouteSortsAnswers(t *testing.T) {
	t.Parallel()
	ctx, topo := bareTopology(t)
	const ws, peer, other = "ws-a", "ws-b", "ws-c"
	ask := func(activity string) string {
		id := delegate.MessageID(ws, activity, 1)
		rec, _ := json.Marshal(events.AskRecord{State: events.AskPending, Workspace: ws, Peer: peer, Activity: activity, MessageID: id})
		if _, err := topo.Asks.Create(ctx, events.AskKey(ws, id), rec); err != nil {
			t.Fatal(err)
		}
		return id
	}
	answer := func(id, activity, msgID, from string) *events.Inbound {
		return &events.Inbound{WorkspaceID: ws, ActivityID: activity, Source: events.SourcePeerAgent,
			SourceWorkspaceID: from, MessageID: msgID, Text: "42", InReplyToMessageID: id}
	}
	open := ask("act-open")
	finished := ask("act-finished")
	if _, err := topo.Handled.Create(ctx, events.HandledKey(ws, "act-finished"), []byte(`{"outcome":"replied"}`)); err != nil {
		t.Fatal(err)
	}
	canvas := answer(open, "row-canvas", "m0", "")
	canvas.Source = events.SourceCanvasUser

	for _, tc := range []struct {
		name string
		in   *events.Inbound
		want delegate.Outcome
	}{
		{"no in_reply_to_message_id", answer("", "row-0", "m0", peer), delegate.NotAnAnswer},
		{"names no question of ours", answer(delegate.MessageID(ws, "nope", 1), "row-1", "m1", peer), delegate.NotAnAnswer},
		{"from another workspace than the one asked", answer(open, "row-2", "m2", other), delegate.NotAnAnswer},
		{"from a canvas user", canvas, delegate.NotAnAnswer},
		{"the answer", answer(open, "row-3", "m3", peer), delegate.Stored},
		{"its redelivery", answer(open, "row-3", "m3", peer), delegate.Duplicate},
		{"posted twice by the peer (new row, same messageId)", answer(open, "row-4", "m3", peer), delegate.Duplicate},
		{"a second, different answer", answer(open, "row-5", "m5", peer), delegate.Unawaited},
		{"the asking message finished while pending", answer(finished, "row-6", "m6", peer), delegate.Unawaited},
	} {
		got, err := delegate.Route(ctx, topo.Asks, topo.Handled, tc.in)
		if got != tc.want {
			t.Errorf("%s: outcome %d, want %d (err %v)", tc.name, got, tc.want, err)
		}
		if (got == delegate.Unawaited) != errors.Is(err, delegate.ErrUnawaited) {
			t.Errorf("%s: error %v", tc.name, err)
		}
	}
	e, err := topo.Asks.Get(ctx, events.AskKey(ws, open))
	if err != nil {
		t.Fatal(err)
	}
	var rec events.AskRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.State != events.AskAnswered || rec.Answer.ActivityID != "row-3" || rec.Answer.Text != "42" {
		t.Errorf("record %+v (%v), want answered by row-3", rec, err)
	}
}
