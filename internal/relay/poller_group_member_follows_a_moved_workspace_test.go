package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// TestPollerGroupMemberFollowsAMovedWorkspace: in a poller group, a
// workspace whose org id (as a platform URL) changes in the registry is
// polled again with a client for the new one, without leaving the member
// and without answering twice; before, its poll kept the old client until
// the workspace moved to another member.
func TestPollerGroupMemberFollowsAMovedWorkspace(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	ws := w.plat.CreateWorkspace("agent")
	put := func(org string) {
		t.Helper()
		if err := w.admin.Put(context.Background(), registry.Entry{ID: ws.ID, Token: ws.Token, PlatformURL: w.plat.URL(), OrgID: org}); err != nil {
			t.Fatal(err)
		}
	}
	sentWith := func(org string, from time.Time) (n int) {
		for _, r := range w.plat.Requests() {
			if r.Header.Get("X-Molecule-Org-Id") == org && !r.At.Before(from) {
				n++
			}
		}
		return n
	}
	put("org-1")
	w.run(t, w.open(t, "MOLECULE_POLLER_GROUP=g", "MOLECULE_HEARTBEAT_INTERVAL=1s"))
	w.send(t, ws.ID, "before the move")
	pipelinetest.Eventually(t, 10*time.Second, "answered through org-1", func() bool { return w.answers(ws.ID, "before the move") == 1 })

	moved := time.Now()
	put("org-2")
	pipelinetest.Eventually(t, 5*time.Second, "a request for org-2", func() bool { return sentWith("org-2", moved) > 0 })
	settled := time.Now().Add(time.Second) // a request of the old poll may still be on the wire
	w.send(t, ws.ID, "after the move")
	pipelinetest.Eventually(t, 10*time.Second, "answered after the move", func() bool { return w.answers(ws.ID, "after the move") == 1 })
	time.Sleep(time.Until(settled) + 2*time.Second) // two heartbeats more
	if n := sentWith("org-1", settled); n > 0 {
		t.Errorf("%d requests for org-1 a second after the move: the old poll still runs", n)
	}
	if n := w.answers(ws.ID, "before the move"); n != 1 {
		t.Errorf("the message before the move was answered %d times, want once", n)
	}
}
