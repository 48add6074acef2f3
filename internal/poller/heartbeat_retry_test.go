package poller_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A heartbeat refused with 429 is sent again after the platform's
// Retry-After, not a whole interval later: a workspace whose heartbeats
// stop goes offline (docs/protocol.md §2).
func TestRateLimitedHeartbeatIsSentAgainAfterRetryAfter(t *testing.T) {
	e := newEnv(t)
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/registry/heartbeat", Count: 1,
		Status: http.StatusTooManyRequests, Body: `{"error":"rate limit exceeded","retry_after":1}`,
		Header: http.Header{"Retry-After": {"1"}}})
	p := e.poller(poller.Config{HeartbeatInterval: 30 * time.Second})
	run(t, p)
	start := time.Now()
	waitFor(t, 10*time.Second, "a heartbeat accepted after the refused one", func() bool {
		return e.plat.Status(e.ws.ID).Heartbeats >= 1
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("accepted heartbeat after %s; want about the 1 s Retry-After", d)
	}
	if n := e.requests(http.MethodPost, "/registry/heartbeat"); n != 2 {
		t.Fatalf("%d heartbeat requests, want the refused one and its retry", n)
	}
}
