package poller_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A workspace holds its start slot (StartConcurrency start at once) only
// until its first fetch: what its first cycle does after the fetch (here
// a broadcast read that takes slow seconds) does not hold up the
// workspaces queued behind it. A poller group's survivor taking over a
// killed member's 1,700 workspaces waited 6 s in that queue.
func TestStartSlotFreedAfterTheFirstFetch(t *testing.T) {
	const slow = 10 * time.Second
	n := poller.StartConcurrency + 44
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	clients := []*molecule.Client{e.client(e.ws)}
	for range n - 1 {
		clients = append(clients, e.client(e.plat.CreateWorkspace("fleet")))
	}
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, QueryContains: "type=broadcast_receive", Latency: slow})
	p := e.poller(poller.Config{Workspaces: clients, HeartbeatInterval: 30 * time.Second})
	start := time.Now()
	run(t, p)
	fetched := func() int {
		seen := map[string]bool{}
		for _, r := range e.plat.Requests() {
			if strings.HasSuffix(r.Path, "/activity") && r.Status != 0 && !strings.Contains(r.Query, "type=broadcast_receive") {
				seen[r.Path] = true
			}
		}
		return len(seen)
	}
	waitFor(t, 3*slow, "every workspace's first fetch", func() bool { return fetched() == n })
	if took := time.Since(start); took >= slow {
		t.Errorf("the %d workspaces' first fetches took %s: the last %d waited for a slot held through a %s broadcast read", n, took.Round(time.Millisecond), n-poller.StartConcurrency, slow)
	} else {
		t.Logf("%d first fetches in %s", n, took.Round(time.Millisecond))
	}
}
