package replier_test

// docs/protocol.md behaviours of the peer-reply path (POST /workspaces/:peer/a2a)
// that the replier relies on. docs/protocol.md §6 lists the
// platform's answers; docs/protocol.md §6 says 200 {"status":"queued"} and 202
// {"queued":true} are success; §17.14 says 502/503 on /a2a may be retried
// only with the same messageId; Retry-After is honoured (§2). What the
// replier does with each answer is internal/replier classify/postFailed:
// 429 and 503+code are "not delivered", other 4xx are permanent (dead
// letter), everything else (502, 503 waking/busy, transport) is "outcome
// unknown" and re-posted with the same messageId.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// a2aPosts are the requests the double received for POST
// /workspaces/<to>/a2a (faulted ones included), in order.
func a2aPosts(plat *moleculetest.Server, to string) []moleculetest.RecordedRequest {
	var out []moleculetest.RecordedRequest
	for _, r := range plat.Requests() {
		if r.Method == http.MethodPost && r.Path == "/workspaces/"+to+"/a2a" {
			out = append(out, r)
		}
	}
	return out
}

func messageIDOf(t *testing.T, body []byte) string {
	t.Helper()
	var b struct {
		Params struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("a2a body %s: %v", body, err)
	}
	return b.Params.Message.MessageID
}

// 503 {"waking":true} / {"busy":true} with Retry-After, and 502, on /a2a:
// the reply is retried (not dead-lettered), re-posted with the same
// messageId, not before the platform's Retry-After, and delivered once.
func TestA2ARetryableRefusalsAreRetriedWithTheSameMessageID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		fault    moleculetest.Fault
		minDelay time.Duration // the second POST comes no earlier than this after the first
	}{
		{"503 waking with Retry-After", moleculetest.Fault{Status: 503, Body: `{"waking":true,"retry_after":1}`,
			Header: http.Header{"Retry-After": {"1"}}}, 900 * time.Millisecond},
		{"503 busy with Retry-After", moleculetest.Fault{Status: 503, Body: `{"busy":true,"retry_after":1}`,
			Header: http.Header{"Retry-After": {"1"}}}, 900 * time.Millisecond},
		{"502 failed to reach workspace agent", moleculetest.Fault{Status: 502, Body: `{"error":"failed to reach workspace agent"}`}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := tc.fault
			f.Method, f.PathPrefix, f.Count = http.MethodPost, "/workspaces/"+e.b.ID+"/a2a", 1
			e.plat.InjectFault(f)
			e.publish(t, e.peerReply("act-1", "after the refusal"))
			r := e.replier(t, e.js, e.topo, replier.Config{})
			st, err := r.Drain(bg(t), 2500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if st.SentA2A != 1 || st.PostErrors != 1 || st.Retried < 1 || st.DeadLettered != 0 {
				t.Fatalf("stats = %+v; want one failed post, a retry and one delivery", st)
			}
			if calls := e.plat.A2ACalls(e.b.ID); len(calls) != 1 {
				t.Fatalf("%d deliveries to B, want 1", len(calls))
			}
			posts := a2aPosts(e.plat, e.b.ID)
			if len(posts) != 2 || posts[0].Status != tc.fault.Status || posts[1].Status != http.StatusOK {
				t.Fatalf("%d a2a posts (%+v); want the refused one and one retry", len(posts), posts)
			}
			want := events.ReplyMessageID("act-1")
			for i, p := range posts {
				if got := messageIDOf(t, p.Body); got != want {
					t.Errorf("post %d messageId = %q, want %q (a retry must keep it)", i, got, want)
				}
			}
			if gap := posts[1].At.Sub(posts[0].At); gap < tc.minDelay {
				t.Errorf("re-posted after %s; the platform asked for Retry-After %s", gap, tc.minDelay)
			}
			if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent {
				t.Errorf("record = %+v, %v; want sent", rec, ok)
			}
			if n := e.replyLeft(t); n != 0 {
				t.Errorf("%d replies left", n)
			}
		})
	}
}

// 402 budget, 403 hierarchy, 401 caller token after a delete, and a bare
// 404 (tenant routing) on /a2a: the reply is dead-lettered as permanent
// after a single POST, and the queue is not stalled.
func TestA2APermanentRefusalsAreDeadLettered(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		prepare func(e *env) (rep events.Reply, to string)
		status  int
		wantErr string
	}{
		{"402 budget", func(e *env) (events.Reply, string) {
			e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.b.ID + "/a2a",
				Status: 402, Body: `{"error":"workspace budget limit exceeded"}`, Count: 1})
			return e.peerReply("act-1", "x"), e.b.ID
		}, 402, "budget"},
		{"403 hierarchy (real double)", func(e *env) (events.Reply, string) {
			c := e.plat.CreateWorkspace("C")
			k := e.plat.CreateChild(c.ID, "C-child")
			r := e.peerReply("act-1", "x")
			r.TargetWorkspaceID = k.ID
			return r, k.ID
		}, 403, "hierarchy"},
		{"401 caller token after delete (real double)", func(e *env) (events.Reply, string) {
			e.plat.Delete(e.a.ID)
			return e.peerReply("act-1", "x"), e.b.ID
		}, 401, "token"},
		{"bare 404 (tenant routing)", func(e *env) (events.Reply, string) {
			e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.b.ID + "/a2a",
				Status: 404, Count: 1})
			return e.peerReply("act-1", "x"), e.b.ID
		}, 404, "404"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rep, to := tc.prepare(e)
			e.publish(t, rep)
			r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{Concurrency: 1}})
			st, err := r.Drain(bg(t), 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			posts := a2aPosts(e.plat, to)
			if len(posts) != 1 || posts[0].Status != tc.status {
				t.Fatalf("%d a2a posts (%+v); want exactly one answered %d", len(posts), posts, tc.status)
			}
			dls, err := dlq.List(fixture(t), e.js, dlq.Filter{Stage: events.StageReplier})
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) != 1 || st.DeadLettered != 1 || st.SentA2A != 0 {
				t.Fatalf("%d dead letters, stats %+v", len(dls), st)
			}
			dl := dls[0].DeadLetter
			if dl.Reason != events.ReasonPermanent || dl.ActivityID != "act-1" || !strings.Contains(dl.Error, tc.wantErr) {
				t.Errorf("dead letter = %+v", dl)
			}
			if rec, found := e.record(t, "act-1"); found && rec.State == events.StatePosting {
				t.Errorf("posting record kept after a refusal: %+v", rec)
			}
			if n := e.replyLeft(t); n != 0 {
				t.Errorf("%d replies left", n)
			}
		})
	}
}

// docs/protocol.md §6: a push-mode peer that does not answer within the platform's
// idle timeout gets the message queued, 202 {"queued":true}; that is a
// success: marked sent, acked, never re-posted.
func TestA2APushPeer202QueuedIsSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithPushTimeout(200*time.Millisecond))
	hold := make(chan struct{})
	var once sync.Once
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // never answers in time
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(agent.Close)
	t.Cleanup(func() { once.Do(func() { close(hold) }) }) // before agent.Close
	p := e.pushPeer(t, agent)
	rep := e.peerReply("act-1", "to a busy push agent")
	rep.TargetWorkspaceID = p.ID
	e.publish(t, rep)
	r := e.replier(t, e.js, e.topo, replier.Config{})
	st, err := r.Drain(bg(t), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	calls := e.plat.A2ACalls(p.ID)
	if len(calls) != 1 || calls[0].Status != http.StatusAccepted {
		t.Fatalf("a2a calls to P = %+v; want one answered 202", calls)
	}
	if st.SentA2A != 1 || st.PostErrors != 0 || st.Retried != 0 || st.DeadLettered != 0 {
		t.Fatalf("stats = %+v; 202 queued must count as sent", st)
	}
	if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent {
		t.Errorf("record = %+v, %v; want sent", rec, ok)
	}
	if n := e.replyLeft(t); n != 0 {
		t.Errorf("%d replies left", n)
	}
}

// docs/protocol.md §6: the replier tells the platform how long it will
// wait for a push peer (X-Timeout, whole seconds, from A2ATimeout), and
// sends the caller header the platform reads.
func TestA2ASendsXTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish(t, e.peerReply("act-1", "hello"))
	r := e.replier(t, e.js, e.topo, replier.Config{A2ATimeout: 45 * time.Second})
	if st, err := r.Drain(bg(t), 300*time.Millisecond); err != nil || st.SentA2A != 1 {
		t.Fatalf("drain: %+v, %v", st, err)
	}
	posts := a2aPosts(e.plat, e.b.ID)
	if len(posts) != 1 {
		t.Fatalf("%d a2a posts", len(posts))
	}
	if h := posts[0].Header; h.Get("X-Timeout") != "45" || h.Get("X-Workspace-ID") != e.a.ID {
		t.Fatalf("a2a headers: X-Timeout %q, X-Workspace-ID %q", h.Get("X-Timeout"), h.Get("X-Workspace-ID"))
	}
}
