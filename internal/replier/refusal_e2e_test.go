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

// A reply to a peer the platform cannot deliver to — one with no URL that
// is not settling (a push-mode workspace gone offline: 503 "workspace has
// no URL"; a never-registered one is queued on 2026-08, see
// TestReplyToUnregisteredPeerQueuedIsSent), or one that does not exist
// (404) — is posted RefusalRetries times, then
// dead-lettered as permanent with the platform's reason. Before, the 503
// was "post outcome unknown" and retried up to max deliveries (8, over
// about 4 minutes on the real platform).
func TestRefusedPeerDeadLetteredAfterShortRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reason string
		status       int
		peer         func(e *env) string
	}{
		{"no URL", "workspace has no URL", http.StatusServiceUnavailable,
			func(e *env) string {
				id := e.plat.CreateWorkspace("gone-offline").ID
				e.plat.SetStatus(id, "offline")
				return id
			}},
		{"does not exist", "does not exist", http.StatusNotFound,
			func(*env) string { return "00000000-0000-4000-8000-00000000dead" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			to := tc.peer(e)
			rep := e.peerReply("act-1", "x")
			rep.TargetWorkspaceID = to
			e.publish(t, rep)
			r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{Concurrency: 1}})
			st, err := r.Drain(bg(t), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			posts := a2aPosts(e.plat, to)
			if len(posts) != replier.RefusalRetries {
				t.Fatalf("%d posts, want %d", len(posts), replier.RefusalRetries)
			}
			for _, p := range posts {
				if p.Status != tc.status {
					t.Fatalf("post answered %d, want %d", p.Status, tc.status)
				}
			}
			dls, err := dlq.List(fixture(t), e.js, dlq.Filter{Stage: events.StageReplier})
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) != 1 || st.DeadLettered != 1 {
				t.Fatalf("%d dead letters, stats %+v", len(dls), st)
			}
			if dl := dls[0].DeadLetter; dl.Reason != events.ReasonPermanent || !strings.Contains(dl.Error, tc.reason) {
				t.Fatalf("dead letter %+v; want permanent with %q", dl, tc.reason)
			}
			if n := e.replyLeft(t); n != 0 {
				t.Fatalf("%d replies left", n)
			}
		})
	}
}
