package poller_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Behaviours of RunOnce that matter when every run is one bounded
// invocation, as in AWS Lambda: a fresh Poller per invocation, a deadline.

// blockSinceSecs holds every activity request with since_secs (the seed's
// window read) until its context ends, while on is set: the invocation's
// deadline runs out during the cold-start seed.
type blockSinceSecs struct {
	on   atomic.Bool
	next http.RoundTripper
}

func (b *blockSinceSecs) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.on.Load() && strings.Contains(r.URL.RawQuery, "since_secs") {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return b.next.RoundTrip(r)
}

// The first invocation registers the workspace in poll mode, then its
// deadline ends during the cold-start seed (no cursor saved). A canvas
// message arrives for the now poll-mode agent. The next invocation — a new
// Poller, as internal/lambdafn builds one per invocation — must still deliver
// it: its cold start takes the registration time from the status bucket,
// not only from memory, so with the backlog window 0 it does not seed past
// a message queued after the registration.
func TestColdStartCutByDeadlineStillDeliversWhatArrivedAfterRegister(t *testing.T) {
	e := newEnv(t)
	tr := &blockSinceSecs{next: http.DefaultTransport}
	tr.on.Store(true)
	c := e.client(e.ws, func(cfg *molecule.Config) { cfg.HTTPClient = &http.Client{Transport: tr} })

	// Invocation 1: registers, then runs out of time in the seed.
	inv1, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	res, _ := e.poller(poller.Config{Workspaces: []*molecule.Client{c}}).RunOnce(inv1)
	cancel()
	if !res.Workspaces[0].Registered {
		t.Fatalf("first invocation did not register: %+v", res.Workspaces[0])
	}
	if res.Workspaces[0].Err == nil {
		t.Fatalf("first invocation's seed was expected to be cut by the deadline: %+v", res.Workspaces[0])
	}
	tr.on.Store(false)

	// Sent to the registered poll-mode agent: it is ours.
	e.sendCanvas(e.ws.ID, "queued after registration")

	// Invocation 2 (and 3): a fresh Poller per invocation, as in Lambda.
	for range 2 {
		if _, err := e.poller(poller.Config{Workspaces: []*molecule.Client{c}}).RunOnce(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.inbound()); n != 1 {
		t.Fatalf("%d messages published, want 1: the message queued after this relay registered the workspace must survive the next invocation's cold-start seed", n)
	}
}

// The budget is at the reserve — kept precisely for heartbeats — and the
// window resets after the invocation's deadline. RunOnce's heartbeat must
// not wait behind the requests that wait for the budget (probe, state
// read): the invocation still sends it, or a workspace polled by a
// scheduled function goes offline under load. (Run's heartbeat loop has
// its own timer and never waits for the budget either.)
func TestOneShotHeartbeatNotHeldBehindRateBudget(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(40, time.Minute))
	c := e.client(e.ws)
	e.runOnce(e.poller(poller.Config{Workspaces: []*molecule.Client{c}}))
	// Other requests of the token (the replier's notifies, say) spend the
	// bucket down to the poller's reserve of 10.
	for c.RateLimit().Remaining > 10 {
		if _, err := c.State(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	before := e.plat.Status(e.ws.ID).Heartbeats

	inv, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	res, _ := e.poller(poller.Config{Workspaces: []*molecule.Client{c}}).RunOnce(inv)
	took := time.Since(start)
	if got := e.plat.Status(e.ws.ID).Heartbeats; got != before+1 || !res.Workspaces[0].Heartbeat {
		t.Fatalf("%d heartbeats sent by a 3 s invocation with the budget at its reserve (result %+v); want 1: the heartbeat must not wait behind the state read's rate-budget wait",
			got-before, res.Workspaces[0])
	}
	// The state read's wait would end after the deadline: the cycle ends at
	// once with a clear error instead of sleeping until the deadline.
	if err := res.Workspaces[0].Err; !errors.Is(err, poller.ErrRateWaitPastDeadline) || took > 2*time.Second {
		t.Fatalf("invocation took %s with error %v; want ErrRateWaitPastDeadline at once", took, err)
	}
}
