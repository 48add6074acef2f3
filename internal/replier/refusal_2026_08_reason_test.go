package replier_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The 2026-08 platform's permanent refusals, answered by the double as
// enteros-core aeec8e47 answers them, are posted once and dead-lettered
// with a reason that names the real cause: talk_to_user_disabled
// (handlers/activity.go:872-877) as the canvas setting, and "tool call
// failed" from a can_delegate=false workspace (handlers/a2a_proxy.go:789-797)
// as can_delegate, not as the hierarchy rules.
func TestRefusalOf2026_08DeadLetteredWithItsCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reason, not string
		set               func(e *env)
		reply             func(e *env) events.Reply
	}{
		{"talk to user disabled", "talking to the user is disabled for this workspace (canvas setting", "",
			func(e *env) { e.plat.SetTalkToUser(e.a.ID, false) },
			func(e *env) events.Reply { return e.canvasReply("act-1", "x") }},
		{"can_delegate false", "may not send A2A messages (can_delegate=false", "hierarchy",
			func(e *env) { e.plat.SetCanDelegate(e.a.ID, false) },
			func(e *env) events.Reply { return e.peerReply("act-1", "x") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.set(e)
			e.publish(t, tc.reply(e))
			r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{Concurrency: 1}})
			if _, err := r.Drain(bg(t), time.Second); err != nil {
				t.Fatal(err)
			}
			posts := 0
			for _, q := range e.plat.Requests() {
				if q.Method == http.MethodPost && (strings.HasSuffix(q.Path, "/notify") || strings.HasSuffix(q.Path, "/a2a")) {
					posts++
				}
			}
			if posts != 1 {
				t.Errorf("%d posts, want 1", posts)
			}
			dls, err := dlq.List(fixture(t), e.js, dlq.Filter{Stage: events.StageReplier})
			if err != nil || len(dls) != 1 {
				t.Fatalf("%d dead letters, %v", len(dls), err)
			}
			dl := dls[0].DeadLetter
			if dl.Reason != events.ReasonPermanent || !strings.Contains(dl.Error, tc.reason) || tc.not != "" && strings.Contains(dl.Error, tc.not) {
				t.Fatalf("dead letter error %q; want %q, without %q", dl.Error, tc.reason, tc.not)
			}
		})
	}
}

// A reply to a peer that never registered is queued by the 2026-08
// platform, 202 {queued:true, queue_id} (handlers/a2a_proxy.go:933-948):
// the reply is sent, not refused.
func TestReplyToUnregisteredPeerQueuedIsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	to := e.plat.CreateWorkspace("never-registered").ID
	rep := e.peerReply("act-1", "x")
	rep.TargetWorkspaceID = to
	e.publish(t, rep)
	r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{Concurrency: 1}})
	st, err := r.Drain(bg(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	posts := a2aPosts(e.plat, to)
	if len(posts) != 1 || posts[0].Status != http.StatusAccepted {
		t.Fatalf("posts %+v, want one answered 202", posts)
	}
	if st.DeadLettered != 0 || st.SentA2A != 1 {
		t.Fatalf("stats %+v, want 1 sent", st)
	}
}
