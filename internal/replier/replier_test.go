package replier_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var quiet = slog.New(slog.DiscardHandler)

type env struct {
	srv     *natstest.Server
	js      jetstream.JetStream
	topo    *events.Topology
	tc      events.TopologyConfig
	plat    *moleculetest.Server
	a, b    moleculetest.Workspace
	clients map[string]*molecule.Client
}

// bg is a run's context: no deadline, so a Drain under it applies no
// start-margin rule. Fixture requests use fixture instead.
func bg(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

// fixtureTimeout bounds a test's own NATS and platform requests. Without
// a deadline nats.go gives a JetStream request its 5 s default, which a
// loaded machine (load 9) outlasted creating a bucket or reading a
// stream's info; the test's assertions do not depend on it.
const fixtureTimeout = 2 * time.Minute

// fixture is the context of a test's own requests (setup, inspection):
// a generous explicit deadline instead of nats.go's 5 s default.
func fixture(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), fixtureTimeout)
	t.Cleanup(cancel)
	return c
}

func newEnv(t *testing.T, opts ...moleculetest.Option) *env {
	t.Helper()
	tc := events.TopologyConfig{Storage: jetstream.MemoryStorage, ReplierAckWait: time.Second}
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	topo, err := events.EnsureTopology(fixture(t), js, tc)
	if err != nil {
		t.Fatal(err)
	}
	plat := moleculetest.NewServer(opts...)
	t.Cleanup(plat.Close)
	e := &env{srv: srv, js: js, topo: topo, tc: tc, plat: plat, a: plat.CreateWorkspace("A"), b: plat.CreateWorkspace("B")}
	e.clients = map[string]*molecule.Client{e.a.ID: e.client(t, e.a)}
	// B is a poll-mode agent, so A's peer replies are queued for it.
	if _, err := e.client(t, e.b).Register(fixture(t), molecule.RegisterRequest{}); err != nil {
		t.Fatalf("register B: %v", err)
	}
	return e
}

func (e *env) client(t *testing.T, w moleculetest.Workspace) *molecule.Client {
	t.Helper()
	c, err := molecule.New(molecule.Config{PlatformURL: e.plat.URL(), WorkspaceID: w.ID, Token: w.Token, MaxRetries: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) conn(t *testing.T) (*nats.Conn, jetstream.JetStream, *events.Topology) {
	t.Helper()
	nc, js := natstest.Connect(t, e.srv.ClientURL())
	topo, err := events.EnsureTopology(fixture(t), js, e.tc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, topo
}

func (e *env) canvasReply(act, text string) events.Reply {
	return events.Reply{WorkspaceID: e.a.ID, ActivityID: act, Source: events.SourceCanvasUser, Text: text,
		MessageID: events.ReplyMessageID(act), Hops: 1, HandledAt: time.Now().UTC()}
}

func (e *env) peerReply(act, text string) events.Reply {
	r := e.canvasReply(act, text)
	r.Source, r.TargetWorkspaceID, r.Hops = events.SourcePeerAgent, e.b.ID, 2
	return r
}

func (e *env) publish(t *testing.T, r events.Reply) {
	t.Helper()
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, events.ReplySubject(r.WorkspaceID), data, events.ReplyMsgID(r.WorkspaceID, r.ActivityID))
}

func (e *env) publishRaw(t *testing.T, subject string, data []byte, id string) {
	t.Helper()
	if _, err := e.js.Publish(fixture(t), subject, data, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

func (e *env) replier(t *testing.T, js jetstream.JetStream, topo *events.Topology, cfg replier.Config) *replier.Replier {
	t.Helper()
	cfg.Logger = quiet
	if cfg.RetryBase == 0 {
		cfg.RetryBase, cfg.RetryMax = 50*time.Millisecond, 2*time.Second
	}
	if cfg.NotifyTimeout == 0 {
		cfg.NotifyTimeout = 300 * time.Millisecond
	}
	r, err := replier.New(js, topo, e.clients, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) replyLeft(t *testing.T) uint64 {
	t.Helper()
	info, err := e.topo.Reply.Info(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (e *env) record(t *testing.T, act string) (events.ReplyRecord, bool) {
	t.Helper()
	entry, err := e.topo.Replies.Get(fixture(t), events.ReplyKey(e.a.ID, act))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.ReplyRecord{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec events.ReplyRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec, true
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCanvasAndSelfRepliesAreNotifiedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	canvas := e.canvasReply("act-1", "hello canvas user")
	self := e.canvasReply("act-2", "note to self")
	self.Source = events.SourceSelf
	e.publish(t, canvas)
	e.publish(t, self)
	r := e.replier(t, e.js, e.topo, replier.Config{})
	st, err := r.Drain(bg(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Notified != 2 || st.Posts != 2 {
		t.Fatalf("stats = %+v", st)
	}
	// Replies are posted concurrently: their order is not promised.
	got := map[string]int{}
	for _, n := range e.plat.Notifications(e.a.ID) {
		got[n.Message]++
	}
	if len(got) != 2 || got[canvas.Text] != 1 || got[self.Text] != 1 {
		t.Fatalf("notifications = %v", got)
	}
	for _, act := range []string{"act-1", "act-2"} {
		if rec, ok := e.record(t, act); !ok || rec.State != events.StateSent || rec.Route != events.RouteNotify {
			t.Errorf("record %s = %+v, %v", act, rec, ok)
		}
	}
	if n := e.replyLeft(t); n != 0 {
		t.Errorf("%d replies left", n)
	}
}

func TestPeerReplyIsSentAsA2A(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := e.peerReply("act-9", "hello peer")
	rep.InReplyToMessageID, rep.ContextID = "their-msg-9", "ctx-9"
	e.publish(t, rep)
	r := e.replier(t, e.js, e.topo, replier.Config{})
	st, err := r.Drain(bg(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.SentA2A != 1 {
		t.Fatalf("stats = %+v", st)
	}
	calls := e.plat.A2ACalls(e.b.ID)
	if len(calls) != 1 {
		t.Fatalf("%d a2a calls to B, want 1", len(calls))
	}
	c := calls[0]
	if c.CallerID != e.a.ID || c.Status != http.StatusOK {
		t.Errorf("call = caller %q status %d", c.CallerID, c.Status)
	}
	var body struct {
		Method string `json:"method"`
		Params struct {
			Message struct {
				Role      string `json:"role"`
				MessageID string `json:"messageId"`
				ContextID string `json:"contextId"`
				Parts     []struct {
					Kind string `json:"kind"`
					Text string `json:"text"`
				} `json:"parts"`
				Metadata map[string]any `json:"metadata"`
			} `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal(c.Body, &body); err != nil {
		t.Fatal(err)
	}
	m := body.Params.Message
	if body.Method != "message/send" || m.Role != "agent" || m.MessageID != events.ReplyMessageID("act-9") ||
		len(m.Parts) != 1 || m.Parts[0].Kind != "text" || m.Parts[0].Text != "hello peer" ||
		m.Metadata["in_reply_to"] != "act-9" || m.Metadata["relay_hops"] != float64(2) ||
		m.Metadata["in_reply_to_message_id"] != rep.InReplyToMessageID || m.ContextID != rep.ContextID {
		t.Errorf("a2a body = %s", c.Body)
	}
	// The caller header the platform reads.
	found := false
	for _, rq := range e.plat.Requests() {
		if rq.Method == http.MethodPost && rq.Path == "/workspaces/"+e.b.ID+"/a2a" {
			found = rq.Header.Get("X-Workspace-ID") == e.a.ID
		}
	}
	if !found {
		t.Error("a2a request lacked X-Workspace-ID: <A>")
	}
	if len(e.plat.Notifications(e.a.ID)) != 0 {
		t.Error("a peer reply must not be notified")
	}
}

func TestTransientFailuresAreRetried(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		fault      moleculetest.Fault
		wantChecks int // feed reads of the window: 1 when the outcome was unknown
	}{
		{"429 with Retry-After", moleculetest.Fault{Status: 429, Body: `{"error":"rate limit exceeded","retry_after":0.3}`,
			Header: http.Header{"Retry-After": {"0.3"}}}, 0},
		{"503 with a code (not processed)", moleculetest.Fault{Status: 503, Body: `{"error":"down","code":"platform_unavailable"}`}, 0},
		{"502 (outcome unknown)", moleculetest.Fault{Status: 502, Body: `{"error":"bad gateway"}`}, 1},
		{"500 (outcome unknown, answered)", moleculetest.Fault{Status: 500, Body: `{"error":"internal"}`}, 1},
		{"dropped connection (outcome unknown)", moleculetest.Fault{Drop: true}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := tc.fault
			f.Method, f.PathPrefix, f.Count = http.MethodPost, "/workspaces/"+e.a.ID+"/notify", 1
			e.plat.InjectFault(f)
			e.publish(t, e.canvasReply("act-1", "eventually"))
			r := e.replier(t, e.js, e.topo, replier.Config{})
			st, err := r.Drain(bg(t), 1500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.plat.Notifications(e.a.ID); len(got) != 1 || got[0].Message != "eventually" {
				t.Fatalf("notifications = %+v, want exactly one", got)
			}
			if st.Notified != 1 || st.PostErrors != 1 || st.Retried < 1 || st.DeadLettered != 0 {
				t.Fatalf("stats = %+v", st)
			}
			checks := 0
			for _, rq := range e.plat.Requests() {
				if rq.Method == http.MethodGet && strings.Contains(rq.Query, "before_ts=") {
					checks++
				}
			}
			if checks != tc.wantChecks {
				t.Fatalf("feed window reads = %d, want %d", checks, tc.wantChecks)
			}
		})
	}
}

func TestPermanentFailuresAreDeadLettered(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		prepare func(e *env) events.Reply
		wantErr string
	}{
		{"400", func(e *env) events.Reply {
			e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.a.ID + "/notify", Status: 400, Body: `{"error":"message is required"}`, Count: 1})
			return e.canvasReply("act-1", "x")
		}, "400"},
		{"401 after the workspace was deleted", func(e *env) events.Reply {
			e.plat.Delete(e.a.ID)
			return e.canvasReply("act-1", "x")
		}, "token"},
		{"peer a2a 404", func(e *env) events.Reply {
			r := e.peerReply("act-1", "x")
			r.TargetWorkspaceID = "00000000-0000-4000-8000-00000000dead"
			return r
		}, "404"},
		{"no client for the workspace", func(e *env) events.Reply {
			r := e.canvasReply("act-1", "x")
			r.WorkspaceID = e.b.ID
			return r
		}, "no platform client"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rep := tc.prepare(e)
			e.publish(t, rep)
			ok := e.canvasReply("act-2", "behind the poison")
			e.publish(t, ok)
			r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{Concurrency: 1}})
			st, err := r.Drain(bg(t), 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			dls, err := dlq.List(fixture(t), e.js, dlq.Filter{Stage: events.StageReplier})
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) < 1 {
				t.Fatalf("no dead letter (stats %+v)", st)
			}
			dl := dls[0].DeadLetter
			if dl.Reason != events.ReasonPermanent || dl.ActivityID != "act-1" || !strings.Contains(dl.Error, tc.wantErr) {
				t.Errorf("dead letter = %+v", dl)
			}
			if rec, found := e.record(t, "act-1"); found && rec.State == events.StatePosting {
				t.Errorf("posting record kept after a refusal that proves nothing was posted: %+v", rec)
			}
			if n := e.replyLeft(t); n != 0 {
				t.Errorf("%d replies left: the poison stalled the queue", n)
			}
			if tc.name != "401 after the workspace was deleted" {
				if got := e.plat.Notifications(e.a.ID); len(got) != 1 || got[0].Message != "behind the poison" {
					t.Errorf("notifications = %+v", got)
				}
			}
		})
	}
}

func TestMalformedReplyIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publishRaw(t, events.ReplySubject(e.a.ID), []byte(`{"v":1,"workspace_id":"x"}`), "bad")
	r := e.replier(t, e.js, e.topo, replier.Config{})
	st, err := r.Drain(bg(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	dls, _ := dlq.List(fixture(t), e.js, dlq.Filter{Reason: events.ReasonMalformed})
	if st.DeadLettered != 1 || len(dls) != 1 {
		t.Fatalf("stats %+v, dead letters %d", st, len(dls))
	}
}

var errCrash = errors.New("simulated crash")

// crashedStage runs a replier on its own connection whose hook "kills" it:
// closes the connection, cancels the context, abandons the reply.
func (e *env) crashedStage(t *testing.T, hooks func(kill func() error) *crashpoint.Replier) {
	t.Helper()
	e.crashedStageWith(t, replier.Config{}, hooks)
}

// crashedStageWith is crashedStage with a replier configured by cfg.
func (e *env) crashedStageWith(t *testing.T, cfg replier.Config, hooks func(kill func() error) *crashpoint.Replier) {
	t.Helper()
	nc, js, topo := e.conn(t)
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	killed := make(chan struct{})
	kill := func() error {
		once.Do(func() { nc.Close(); cancel(); close(killed) })
		return errCrash
	}
	r := e.replier(t, js, topo, cfg)
	h, reached := markReached(hooks(kill))
	done := make(chan error, 1)
	go func() { done <- r.Run(crashpoint.WithReplier(runCtx, h)) }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("crash point never reached")
	}
	// A hook may do slow test-side work before it kills (filling the feed
	// with thousands of rows): that time is the test's, not the replier's,
	// so it has its own, wider guard.
	select {
	case <-killed:
	case <-time.After(2 * time.Minute):
		t.Fatal("crash hook never killed the replier")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("crashed replier did not stop")
	}
}

// markReached wraps h's hooks so the returned channel closes when the
// replier first enters any of them.
func markReached(h *crashpoint.Replier) (*crashpoint.Replier, <-chan struct{}) {
	reached := make(chan struct{})
	var once sync.Once
	mark := func(f func(context.Context, *events.Reply) error) func(context.Context, *events.Reply) error {
		if f == nil {
			return nil
		}
		return func(ctx context.Context, r *events.Reply) error {
			once.Do(func() { close(reached) })
			return f(ctx, r)
		}
	}
	return &crashpoint.Replier{BeforePost: mark(h.BeforePost), AfterPost: mark(h.AfterPost), AfterSent: mark(h.AfterSent)}, reached
}

func TestCrashPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		peer  bool
		hooks func(kill func() error) *crashpoint.Replier
		check func(t *testing.T, st replier.Stats)
	}{
		{"notify: after POST before sent record", false, func(kill func() error) *crashpoint.Replier {
			return &crashpoint.Replier{AfterPost: func(context.Context, *events.Reply) error { return kill() }}
		}, func(t *testing.T, st replier.Stats) {
			if st.Reconciled != 1 || st.Posts != 0 {
				t.Errorf("stats = %+v, want the earlier notify found on the feed and no post", st)
			}
		}},
		{"notify: posting record written, POST never sent", false, func(kill func() error) *crashpoint.Replier {
			return &crashpoint.Replier{BeforePost: func(context.Context, *events.Reply) error { return kill() }}
		}, func(t *testing.T, st replier.Stats) {
			if st.Reposted != 1 || st.Notified != 1 {
				t.Errorf("stats = %+v, want one post after reconciliation found nothing", st)
			}
		}},
		{"notify: after sent record before ack", false, func(kill func() error) *crashpoint.Replier {
			return &crashpoint.Replier{AfterSent: func(context.Context, *events.Reply) error { return kill() }}
		}, func(t *testing.T, st replier.Stats) {
			if st.Duplicates != 1 || st.Posts != 0 {
				t.Errorf("stats = %+v, want a duplicate and no post", st)
			}
		}},
		{"a2a: after sent record before ack", true, func(kill func() error) *crashpoint.Replier {
			return &crashpoint.Replier{AfterSent: func(context.Context, *events.Reply) error { return kill() }}
		}, func(t *testing.T, st replier.Stats) {
			if st.Duplicates != 1 || st.Posts != 0 {
				t.Errorf("stats = %+v, want a duplicate and no post", st)
			}
		}},
		{"a2a: posting record written, POST never sent", true, func(kill func() error) *crashpoint.Replier {
			return &crashpoint.Replier{BeforePost: func(context.Context, *events.Reply) error { return kill() }}
		}, func(t *testing.T, st replier.Stats) {
			if st.Reposted != 1 || st.SentA2A != 1 {
				t.Errorf("stats = %+v, want one re-post with the same messageId", st)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rep := e.canvasReply("act-1", "exactly once please")
			if tc.peer {
				rep = e.peerReply("act-1", "exactly once please")
			}
			e.publish(t, rep)
			e.crashedStage(t, tc.hooks)

			_, js, topo := e.conn(t)
			r := e.replier(t, js, topo, replier.Config{})
			runCtx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(runCtx) }()
			waitFor(t, 10*time.Second, "the reply to be acked", func() bool { return e.replyLeft(t) == 0 })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			delivered := len(e.plat.Notifications(e.a.ID))
			if tc.peer {
				delivered = len(e.plat.A2ACalls(e.b.ID))
			}
			if delivered != 1 {
				t.Fatalf("delivered %d times, want exactly 1", delivered)
			}
			if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent {
				t.Errorf("record = %+v, %v; want sent", rec, ok)
			}
			tc.check(t, r.Stats())
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, cfg := range []replier.Config{
		{Config: stage.Config{Concurrency: -1}},
		{Config: stage.Config{RetryBase: time.Minute, RetryMax: time.Second}},
		{Config: stage.Config{ProgressInterval: 2 * time.Second}}, // >= AckWait 1s
	} {
		if _, err := replier.New(e.js, e.topo, e.clients, cfg); !errors.Is(err, replier.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := replier.New(e.js, e.topo, nil, replier.Config{}); !errors.Is(err, replier.ErrInvalidConfig) {
		t.Errorf("New without clients = %v", err)
	}
	r, err := replier.New(e.js, e.topo, e.clients, replier.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); c.Concurrency != 16 || c.NotifyTimeout != 30*time.Second || c.A2ATimeout != 10*time.Minute ||
		c.ProgressInterval != time.Second/3 || c.RetryBase != 2*time.Second || c.RetryMax != 5*time.Minute {
		t.Errorf("defaults = %+v", c)
	}
}

// Posts keep the rate budget's reserve for the heartbeat, even when they run
// concurrently: with a limit of 5 a window and a reserve of 3, four replies
// are posted at most one per window and a heartbeat right after the drain
// still gets through (docs/protocol.md §2).
func TestPostsKeepTheHeartbeatsRateReserve(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(5, 3*time.Second))
	// One request to learn the budget, as the poller's would.
	if _, err := e.clients[e.a.ID].State(fixture(t)); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		e.publish(t, e.canvasReply(fmt.Sprintf("act-%d", i), fmt.Sprintf("reply %d", i)))
	}
	r := e.replier(t, e.js, e.topo, replier.Config{RateReserve: 3})
	// A short idle, so the heartbeat below lands in the window of the last
	// post (a replier that spent the reserve leaves it nothing).
	st, err := r.Drain(bg(t), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Notified != 4 {
		t.Fatalf("stats = %+v", st)
	}
	for _, req := range e.plat.Requests() {
		if req.Status == 429 {
			t.Fatalf("%s %s got 429: the replier spent the reserve", req.Method, req.Path)
		}
	}
	hb, err := e.clients[e.a.ID].Heartbeat(fixture(t), molecule.Heartbeat{})
	if err != nil || hb.Status != "ok" {
		t.Fatalf("heartbeat after the burst: %+v %v", hb, err)
	}
}
