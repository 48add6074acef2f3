package poller_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// On the poller's one clock, with heartbeats rounded to its grid, every
// workspace of a fleet still heartbeats once per interval (the platform
// marks a workspace offline after about 90 s without one), none twice;
// and once Run returned, nothing it scheduled sends anything more.
func TestEveryWorkspaceHeartbeatsEachIntervalOnTheFleetClock(t *testing.T) {
	const (
		n        = 12
		interval = 400 * time.Millisecond
		window   = 6 * interval
	)
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	clients := []*molecule.Client{e.client(e.ws)}
	for range n - 1 {
		clients = append(clients, e.client(e.plat.CreateWorkspace("fleet")))
	}
	p := e.poller(poller.Config{Workspaces: clients, PollInterval: 200 * time.Millisecond, HeartbeatInterval: interval})
	poller.UseClockGrid(p, interval/20) // heartbeats are gridded, as 30 s ones are on 250 ms
	stop := run(t, p)
	counts := func() []int {
		out := make([]int, len(clients))
		for i, c := range clients {
			out[i] = e.plat.Status(c.WorkspaceID()).Heartbeats
		}
		return out
	}
	waitFor(t, 20*time.Second, "every workspace's first heartbeat", func() bool {
		for _, c := range counts() {
			if c == 0 {
				return false
			}
		}
		return true
	})
	from := counts()
	time.Sleep(window)
	to := counts()
	for i := range clients {
		// 6 intervals: 6 heartbeats, give or take one at either end of the
		// window, and a late one on a loaded machine.
		if got := to[i] - from[i]; got < 4 || got > 7 {
			t.Errorf("workspace %d: %d heartbeats in %s, want 6 (one every %s)", i, got, window, interval)
		}
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	before := len(e.plat.Requests())
	time.Sleep(3 * interval)
	if after := e.plat.Requests()[before:]; len(after) > 0 {
		t.Fatalf("%d requests after Run returned, the first %s %s", len(after), after[0].Method, after[0].Path)
	}
}
