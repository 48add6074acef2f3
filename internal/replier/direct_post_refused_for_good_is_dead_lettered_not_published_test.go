package replier_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A direct post the platform refuses for good (403) is not left to the
// stream, whose delivery would post it again: PostDirect returns the dead
// letter without publish and leaves no reply record, and DeadLetterDirect
// writes the dead letter the stream's replier would have written, once
// however often a redelivery writes it again. It replays through the
// stream like any replier dead letter.
func TestDirectPostRefusedForGoodIsDeadLetteredNotPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.a.ID + "/notify",
		Status: http.StatusForbidden, Body: `{"error":"talk_to_user_disabled"}`, Count: 1})
	rp := e.replier(t, e.js, e.topo, replier.Config{})
	data, err := e.canvasReply("act-1", "refused once").Marshal()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	o, publish := rp.PostDirect(context.Background(), data, events.PostingMark{At: now, Deadline: rp.DirectPostDeadline(now)}, func() {})
	reason, cause, refused := o.DeadLetterReason()
	if !refused || publish || reason != events.ReasonPermanent || cause == nil || !strings.Contains(cause.Error(), "talk_to_user_disabled") {
		t.Fatalf("outcome %v (%v) with publish %v: want the permanent refusal's dead letter, not published", o, cause, publish)
	}
	if rec, found := e.record(t, "act-1"); found {
		t.Errorf("reply record %+v after a refusal: want none", rec)
	}

	refusal := events.Refusal{Reason: reason, Error: cause.Error(), At: now}
	for range 2 { // the second: a redelivery of the inbound message
		if err := rp.DeadLetterDirect(fixture(t), e.a.ID, "act-1", data, refusal); err != nil {
			t.Fatal(err)
		}
	}
	dls, err := dlq.List(fixture(t), e.js, dlq.Filter{Stage: events.StageReplier})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	if dl := dls[0].DeadLetter; dl.Reason != events.ReasonPermanent || dl.Error != cause.Error() || dl.ActivityID != "act-1" ||
		dl.OriginalSubject != events.ReplySubject(e.a.ID) || string(dl.Envelope) != string(data) {
		t.Errorf("dead letter %+v", dl)
	}
	if st := rp.Stats(); st.DirectRefused != 1 || st.DeadLettered != 1 || st.DirectFallbacks != 0 || st.Posts != 1 {
		t.Errorf("stats %+v, want one refused direct post, one dead letter", st)
	}

	if err := dlq.Replay(fixture(t), e.js, dls[0].Seq); err != nil {
		t.Fatal(err)
	}
	e.runUntilAcked(t, replier.Config{}, 15*time.Second)
	if got := e.plat.Notifications(e.a.ID); len(got) != 1 || got[0].Message != "refused once" {
		t.Errorf("notifications after the replay: %+v, want the reply once", got)
	}
}
