package molecule_test

// docs/protocol.md behaviours of POST /workspaces/:peer/a2a that the client
// relies on: the refusals of docs/protocol.md §6 (402 budget,
// 503 waking/busy with Retry-After, 502, bare 404, 403 hierarchy), each
// typed and never re-sent (docs/protocol.md §2: never re-send a POST blindly), and
// the long /a2a timeout (docs/protocol.md §6: a push peer may hold the call).

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// a2aRequests counts the requests the double received for POST
// /workspaces/<to>/a2a, faulted ones included.
func a2aRequests(s *moleculetest.Server, to string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == http.MethodPost && r.Path == "/workspaces/"+to+"/a2a" {
			n++
		}
	}
	return n
}

// docs/protocol.md §6 refusals of /a2a: each is an *APIError with the right status,
// sentinel, message and Retry-After, and the POST is sent exactly once.
func TestA2ARefusalsAreTypedAndNeverResent(t *testing.T) {
	sentinels := []error{molecule.ErrUnauthorized, molecule.ErrCursorLost, molecule.ErrRateLimited,
		molecule.ErrPlatformUnavailable, molecule.ErrTenantRouting, molecule.ErrNotFound, molecule.ErrWorkspaceRemoved}
	cases := []struct {
		name   string
		status int
		body   string
		header http.Header
		want   error // sentinel, nil for none
		retry  time.Duration
		msg    string
	}{
		{"402 budget", http.StatusPaymentRequired, `{"error":"workspace budget limit exceeded"}`, nil,
			nil, 0, "workspace budget limit exceeded"},
		{"503 waking (hibernated target)", http.StatusServiceUnavailable, `{"waking":true,"retry_after":15}`,
			http.Header{"Retry-After": {"15"}}, molecule.ErrPlatformUnavailable, 15 * time.Second, ""},
		{"503 busy (session target)", http.StatusServiceUnavailable, `{"busy":true,"retry_after":30}`,
			http.Header{"Retry-After": {"30"}}, molecule.ErrPlatformUnavailable, 30 * time.Second, ""},
		{"503 restarting", http.StatusServiceUnavailable, `{"restarting":true}`, nil,
			molecule.ErrPlatformUnavailable, 0, ""},
		{"502 not publicly routable", http.StatusBadGateway, `{"error":"workspace URL is not publicly routable"}`, nil,
			molecule.ErrPlatformUnavailable, 0, "workspace URL is not publicly routable"},
		{"502 failed to read agent response", http.StatusBadGateway, `{"error":"failed to read agent response","delivery_confirmed":false}`, nil,
			molecule.ErrPlatformUnavailable, 0, "failed to read agent response"},
		{"bare 404 is tenant routing", http.StatusNotFound, ``, nil, molecule.ErrTenantRouting, 0, ""},
		{"404 workspace not found", http.StatusNotFound, `{"error":"workspace not found"}`, nil, molecule.ErrNotFound, 0, "workspace not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := platform(t)
			_, ca := registered(t, s, "a")
			b, _ := registered(t, s, "b")
			s.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + b.ID + "/a2a",
				Status: tc.status, Body: tc.body, Header: tc.header})
			res, err := ca.SendA2A(context.Background(), molecule.A2AMessage{To: b.ID, Text: "reply", MessageID: "m-1"})
			var ae *molecule.APIError
			if res != nil || !errors.As(err, &ae) {
				t.Fatalf("SendA2A = %+v, %v; want an *APIError", res, err)
			}
			if ae.StatusCode != tc.status || molecule.StatusOf(err) != tc.status {
				t.Fatalf("status = %d, want %d", ae.StatusCode, tc.status)
			}
			for _, sent := range sentinels {
				if errors.Is(err, sent) != (sent == tc.want) {
					t.Errorf("errors.Is(err, %v) = %v", sent, errors.Is(err, sent))
				}
			}
			if got := molecule.RetryAfterOf(err); got != tc.retry {
				t.Errorf("RetryAfter = %v, want %v", got, tc.retry)
			}
			if tc.msg != "" && ae.Message != tc.msg {
				t.Errorf("Message = %q, want %q", ae.Message, tc.msg)
			}
			if n := a2aRequests(s, b.ID); n != 1 {
				t.Fatalf("%d a2a requests; a POST must never be re-sent", n)
			}
		})
	}
}

// docs/protocol.md §6 (caller checks): a caller that may not talk to the target per
// the hierarchy gets 403 from the real double; it is a plain *APIError (no
// sentinel: not auth, not unavailable) and is not re-sent.
func TestA2AHierarchy403(t *testing.T) {
	s := platform(t)
	_, ca := registered(t, s, "a")
	c := s.CreateWorkspace("c")
	k := s.CreateChild(c.ID, "c-child") // another root's child: not a sibling, not a relative of a
	res, err := ca.SendA2A(context.Background(), molecule.A2AMessage{To: k.ID, Text: "reply", MessageID: "m-1"})
	var ae *molecule.APIError
	if res != nil || !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden ||
		!strings.Contains(ae.Message, "cannot communicate per hierarchy rules") {
		t.Fatalf("SendA2A = %+v, %v; want 403 access denied", res, err)
	}
	if errors.Is(err, molecule.ErrUnauthorized) || errors.Is(err, molecule.ErrPlatformUnavailable) || errors.Is(err, molecule.ErrNotFound) {
		t.Fatalf("403 matched a sentinel: %v", err)
	}
	if n := a2aRequests(s, k.ID); n != 1 {
		t.Fatalf("%d a2a requests, want 1", n)
	}
	if n := len(s.A2ACalls(k.ID)); n != 0 {
		t.Fatalf("the refused call was delivered (%d)", n)
	}
}

// docs/protocol.md §6: a push peer holds /a2a until its agent answers (up to 30
// minutes), so SendA2A is bounded by its context only, never by
// RequestTimeout. The control shows RequestTimeout is in force for the
// other calls of the same client.
func TestA2ANotBoundedByRequestTimeout(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, _ := registered(t, s, "a")
	ca := clientFor(t, s, a, func(c *molecule.Config) { c.RequestTimeout = 100 * time.Millisecond; c.MaxRetries = -1 })

	peer := newPeerAgent(t)
	p := s.CreateWorkspace("p")
	if _, err := clientFor(t, s, p).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: peer.url()}); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	peer.mu.Lock()
	peer.hold = hold
	peer.mu.Unlock()
	var once sync.Once
	free := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(free) // runs before the double and the peer are closed
	time.AfterFunc(500*time.Millisecond, free)

	start := time.Now()
	res, err := ca.SendA2A(ctx, molecule.A2AMessage{To: p.ID, Text: "slow answer", MessageID: "m-slow", Timeout: time.Minute})
	if err != nil || res.StatusCode != http.StatusOK || res.Queued || !strings.Contains(string(res.Body), "pong") {
		t.Fatalf("SendA2A to a slow push peer = %+v, %v; RequestTimeout must not cut it", res, err)
	}
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Fatalf("answered after %s: the peer did not hold the call, the test proves nothing", waited)
	}

	// Control: the same client's GET is cut by RequestTimeout.
	s.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + ca.WorkspaceID() + "/state", Latency: 500 * time.Millisecond, Count: 1})
	if _, err := ca.State(ctx); !errors.Is(err, molecule.ErrPlatformUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("State under 500ms latency with a 100ms RequestTimeout = %v", err)
	}
}
