package relay_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// TestChangedTokenReachesTheRunningPoller: a workspace in the registry
// when the relay starts is given a new token (`workspaces add` again)
// while it runs; the running poller sends the new token from its next
// request, with no pause and resume, and once the double refuses the old
// token the workspace is still polled and answered, its earlier message
// not answered again (the cursor and state stayed).
func TestChangedTokenReachesTheRunningPoller(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	ws := w.plat.CreateWorkspace("agent")
	w.put(t, ws.ID, ws.Token)
	// A heartbeat a second: an idle poller makes a request soon after the
	// change, which shows the token it holds.
	w.run(t, w.open(t, "MOLECULE_HEARTBEAT_INTERVAL=1s"))

	w.send(t, ws.ID, "before the change")
	pipelinetest.Eventually(t, 10*time.Second, "answered with the first token", func() bool { return w.answers(ws.ID, "before the change") == 1 })

	fresh := w.plat.MintToken(ws.ID)
	changed := time.Now()
	w.put(t, ws.ID, fresh)
	pipelinetest.Eventually(t, 5*time.Second, "a request with the new token", func() bool { return w.sawToken(fresh, changed) })
	w.plat.RevokeToken(ws.Token)
	revoked := time.Now()

	w.send(t, ws.ID, "after the change")
	pipelinetest.Eventually(t, 10*time.Second, "answered with the new token", func() bool { return w.answers(ws.ID, "after the change") == 1 })
	if n := w.answers(ws.ID, "before the change"); n != 1 {
		t.Errorf("the message before the change was answered %d times, want once", n)
	}
	for _, r := range w.plat.Requests() {
		if r.At.After(revoked) && r.Status == 401 {
			t.Errorf("%s %s at +%s refused (401) after the old token was revoked", r.Method, r.Path, r.At.Sub(revoked))
		}
	}
}
