package poller_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// pushURL is a URL the double accepts at registration ("localhost" by
// name; loopback IP literals are refused). Nothing listens there: these
// tests look at registration, heartbeat and lifecycle only.
const pushURL = "http://localhost:1/a2a/0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"

// A push workspace on an OLD platform: registered with its URL once, never
// fetched (only the generation probe reads the feed), heartbeating on its
// timer, and still stopped when the workspace is deleted.
func TestPushWorkspaceOnOldPlatformHeartbeatsWithoutFetching(t *testing.T) {
	e := newEnv(t, moleculetest.WithGeneration(moleculetest.Gen2026_04), moleculetest.WithRateLimit(0, 0))
	p := e.poller(poller.Config{HeartbeatInterval: 50 * time.Millisecond, SSE: true, Push: map[string]string{e.ws.ID: pushURL}})
	stop := run(t, p)

	waitFor(t, 10*time.Second, "registered in push mode with the URL", func() bool {
		st := e.plat.Status(e.ws.ID)
		return st.URL == pushURL && st.DeliveryMode == "push"
	})
	beats := e.plat.Status(e.ws.ID).Heartbeats
	waitFor(t, 10*time.Second, "heartbeats on the timer", func() bool { return e.plat.Status(e.ws.ID).Heartbeats >= beats+3 })
	if n := e.plat.Status(e.ws.ID).Registrations; n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
	if n := e.requests(http.MethodGet, "/activity"); n > 1 {
		t.Fatalf("%d activity requests, want at most the generation probe", n)
	}
	if n := e.requests(http.MethodGet, "/events/stream"); n != 0 {
		t.Fatalf("%d event-stream connects for a push workspace", n)
	}
	st, err := p.Status(ctx(t))
	if err != nil || st[0].Stopped != "" || st[0].DeliveryMode != "push" || !st[0].Registered {
		t.Fatalf("status: %+v %v", st, err)
	}

	e.plat.Delete(e.ws.ID)
	waitFor(t, 10*time.Second, "deleted push workspace stopped", func() bool {
		st, err := p.Status(ctx(t))
		return err == nil && st[0].Stopped == poller.StoppedRemoved
	})
	if err := stop(); !errors.Is(err, molecule.ErrWorkspaceRemoved) {
		t.Fatalf("Run: %v, want ErrWorkspaceRemoved", err)
	}
}

// On a NEW platform: RunOnce registers the push URL once per poller,
// heartbeats every run and fetches nothing; a later poll-mode run
// registers the workspace in poll mode again.
func TestPushWorkspaceOnNewPlatformAndBackToPoll(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{Push: map[string]string{e.ws.ID: pushURL}})
	for i := range 2 {
		r := e.runOnce(p)
		if r.Registered != (i == 0) || !r.Heartbeat || r.Fetched != 0 || r.Stopped {
			t.Fatalf("run %d: %+v", i, r)
		}
	}
	if st := e.plat.Status(e.ws.ID); st.DeliveryMode != "push" || st.URL != pushURL || st.Registrations != 1 || st.Heartbeats != 2 {
		t.Fatalf("platform view: %+v", st)
	}
	if n := e.requests(http.MethodGet, "/activity"); n != 1 {
		t.Fatalf("%d activity requests, want the single generation probe", n)
	}

	r := e.runOnce(e.poller(poller.Config{}))
	if !r.Registered || e.plat.Status(e.ws.ID).DeliveryMode != "poll" {
		t.Fatalf("poll-mode run after push mode did not re-register in poll mode: %+v, %+v", r, e.plat.Status(e.ws.ID))
	}
}

func TestPushConfigValidation(t *testing.T) {
	e := newEnv(t)
	c := e.client(e.ws)
	for name, push := range map[string]map[string]string{
		"unknown workspace": {"b48f61e0-0000-4000-8000-000000000002": pushURL},
		"not http":          {e.ws.ID: "remote://no-inbound"},
		"no host":           {e.ws.ID: "http:///a2a/x"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := poller.New(e.js, e.topo, poller.Config{Workspaces: []*molecule.Client{c}, Push: push})
			if !errors.Is(err, poller.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
