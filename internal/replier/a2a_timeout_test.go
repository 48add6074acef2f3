package replier_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A push peer whose agent answers after the replier's A2ATimeout but
// within the X-Timeout sent (whole seconds): the replier waits for the
// platform's answer (A2AGrace longer) instead of timing out itself and
// posting again, which would deliver the message to the agent again each
// time (docs/protocol.md §6: a client timeout followed by a blind retry
// duplicates the message).
func TestA2APostWaitsForThePlatformPastXTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var got atomic.Int64
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		time.Sleep(600 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": "1", "result": map[string]any{"kind": "message", "role": "agent"}})
	}))
	t.Cleanup(agent.Close)
	p := e.pushPeer(t, agent)
	rep := e.peerReply("act-1", "to a slow push agent")
	rep.TargetWorkspaceID = p.ID
	e.publish(t, rep)
	r := e.replier(t, e.js, e.topo, replier.Config{A2ATimeout: 400 * time.Millisecond})
	st, err := r.Drain(bg(t), 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Load(); n != 1 {
		t.Fatalf("the push agent received the reply %d times, want 1 (stats %+v)", n, st)
	}
	if st.SentA2A != 1 || st.PostErrors != 0 || st.Retried != 0 {
		t.Fatalf("stats = %+v; want one post, answered", st)
	}
	if calls := e.plat.A2ACalls(p.ID); len(calls) != 1 || calls[0].Status != http.StatusOK {
		t.Fatalf("a2a calls %+v", calls)
	}
	if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent {
		t.Errorf("record = %+v, %v; want sent", rec, ok)
	}
}

// Under a run deadline (a Lambda drain) a peer reply is not deferred
// because A2ATimeout (10 min by default) does not fit: its X-Timeout is
// shortened to what is left minus StartMargin and A2AGrace, in whole
// seconds; when not even MinA2ATimeout fits, the drain takes no reply.
func TestA2AXTimeoutShrinksToTheRunDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		posted   bool
	}{
		{"room for a shorter X-Timeout", 20 * time.Second, true},
		{"no room even for the minimum", replier.MinA2ATimeout + replier.A2AGrace + 2*time.Second - 500*time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.publish(t, e.peerReply("act-1", "hello"))
			r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{StartMargin: 2 * time.Second}})
			ctx, cancel := context.WithTimeout(bg(t), tc.deadline)
			defer cancel()
			start := time.Now()
			st, err := r.Drain(ctx, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			posts := a2aPosts(e.plat, e.b.ID)
			if !tc.posted {
				if len(posts) != 0 || st.SentA2A != 0 {
					t.Fatalf("posted %d, stats %+v; want the reply left for a later run", len(posts), st)
				}
				// Not taken at all, so no delivery was spent on it: a
				// deferral loop would dead-letter it after MaxDeliver.
				ci, err := e.topo.Replier.Info(fixture(t))
				if err != nil {
					t.Fatal(err)
				}
				if n := e.replyLeft(t); n != 1 || ci.NumPending != 1 || ci.NumRedelivered != 0 {
					t.Fatalf("%d replies left, consumer %d pending, %d redelivered; want it untouched", n, ci.NumPending, ci.NumRedelivered)
				}
				return
			}
			if len(posts) != 1 || st.SentA2A != 1 || st.Deferred != 0 {
				t.Fatalf("posted %d, stats %+v; want one post", len(posts), st)
			}
			xt, err := strconv.Atoi(posts[0].Header.Get("X-Timeout"))
			maxXT := (tc.deadline - time.Since(start) + time.Second - 2*time.Second - replier.A2AGrace) / time.Second
			if err != nil || xt < int(replier.MinA2ATimeout/time.Second) || xt > int(maxXT)+1 {
				t.Fatalf("X-Timeout %q; want %d..%d s", posts[0].Header.Get("X-Timeout"), replier.MinA2ATimeout/time.Second, maxXT)
			}
		})
	}
}

// pushPeer creates a workspace registered in push mode at agent's URL
// ("localhost" by name: the platform refuses loopback IP literals).
func (e *env) pushPeer(t *testing.T, agent *httptest.Server) moleculetest.Workspace {
	t.Helper()
	u, err := url.Parse(agent.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := e.plat.CreateWorkspace("P")
	if _, err := e.client(t, p).Register(fixture(t), molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: "http://localhost:" + u.Port() + "/"}); err != nil {
		t.Fatal(err)
	}
	return p
}
