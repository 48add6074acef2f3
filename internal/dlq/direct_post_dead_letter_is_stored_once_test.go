package dlq_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The dead letter of a refused direct post is the replier's, stored once
// however often a redelivery writes it again (PublishStored says which
// write was dropped), and its replay puts the reply on the reply stream,
// where it never was.
func TestDirectPostDeadLetterIsStoredOnceAndReplaysToTheReplyStream(t *testing.T) {
	t.Parallel()
	js, topo := setup(t, events.TopologyConfig{})
	ctx := bg(t)
	reply, err := events.Reply{WorkspaceID: wsA, ActivityID: "a1", Source: events.SourceCanvasUser, Text: "refused", MessageID: "m"}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	refusal := events.Refusal{Reason: events.ReasonPermanent, Error: "talking to the user is disabled", At: time.Now().UTC()}
	for i, want := range []bool{true, false} {
		_, stored, err := dlq.PublishStored(ctx, js, dlq.OfDirectPost(wsA, "a1", reply, refusal))
		if err != nil || stored != want {
			t.Fatalf("write %d: stored %v (%v), want %v", i+1, stored, err, want)
		}
	}
	entries, err := dlq.List(ctx, js, dlq.Filter{Stage: events.StageReplier})
	if err != nil || len(entries) != 1 {
		t.Fatalf("dead letters %+v (%v), want 1", entries, err)
	}
	if dl := entries[0].DeadLetter; dl.Reason != refusal.Reason || dl.Error != refusal.Error || dl.OriginalSubject != events.ReplySubject(wsA) ||
		dl.OriginalStream != events.StreamReply || dl.Deliveries != 1 || string(dl.Envelope) != string(reply) {
		t.Errorf("dead letter %+v", dl)
	}
	if err := dlq.Replay(ctx, js, entries[0].Seq); err != nil {
		t.Fatal(err)
	}
	m, err := topo.Reply.GetLastMsgForSubject(ctx, events.ReplySubject(wsA))
	if err != nil || string(m.Data) != string(reply) {
		t.Fatalf("reply stream after the replay: %v (%v), want the reply", m, err)
	}
	if left, _ := dlq.List(ctx, js, dlq.Filter{}); len(left) != 0 {
		t.Errorf("%d dead letters left after the replay", len(left))
	}
}
