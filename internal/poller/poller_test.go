package poller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

func TestRunOnceDeliversMessagesOnceAndSkipsOwnRows(t *testing.T) {
	e := newEnv(t)
	peer := e.plat.CreateWorkspace("peer-b")
	p := e.poller(poller.Config{Capabilities: molecule.Capabilities{Heartbeat: true}, IdleTimeoutSeconds: 120})

	// First run on an empty feed: registers, heartbeats, seeds.
	r := e.runOnce(p)
	if !r.Registered || !r.Heartbeat || r.Generation != molecule.GenerationNew {
		t.Fatalf("first run: %+v", r)
	}
	if st := e.plat.Status(e.ws.ID); st.DeliveryMode != "poll" || st.Registrations != 1 {
		t.Fatalf("platform view after first run: %+v", st)
	}

	// The first messages ever sent must not be lost to the cold-start seed.
	e.sendCanvas(e.ws.ID, "hello")
	if st, body, err := e.plat.SendPeer(ctx(t), peer, e.ws.ID, "from b"); err != nil || st != 200 {
		t.Fatalf("send peer: %d %s %v", st, body, err)
	}
	if _, err := e.client(e.ws).Notify(ctx(t), "my own reply", nil); err != nil {
		t.Fatalf("notify: %v", err)
	}
	e.sendCanvas(e.ws.ID, "again")

	r = e.runOnce(p)
	if r.Published != 3 || r.Skipped[poller.SkipOwnNotify] != 1 || r.Registered || r.Malformed != 0 {
		t.Fatalf("second run: %+v", r)
	}
	got := e.inbound()
	assertExactlyOnce(t, got, e.messageRowIDs(e.ws.ID))
	if len(got) != 3 {
		t.Fatalf("got %d envelopes", len(got))
	}
	wantText := []string{"hello", "from b", "again"}
	for i, m := range got {
		if m.Text != wantText[i] || m.WorkspaceID != e.ws.ID || len(m.Raw) == 0 || m.CreatedAt.IsZero() || m.PolledAt.IsZero() {
			t.Errorf("envelope %d: %+v", i, m)
		}
	}
	if got[0].Source != events.SourceCanvasUser || got[1].Source != events.SourcePeerAgent || got[1].SourceWorkspaceID != peer.ID {
		t.Errorf("sources: %q, %q (%q)", got[0].Source, got[1].Source, got[1].SourceWorkspaceID)
	}
	msg, err := e.topo.Inbound.GetMsg(ctx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if id := msg.Header.Get("Nats-Msg-Id"); id != events.InboundMsgID(e.ws.ID, got[0].ActivityID) {
		t.Errorf("Nats-Msg-Id %q", id)
	}

	// The heartbeat carries the full body.
	var hb struct {
		WorkspaceID     string         `json:"workspace_id"`
		RuntimeMetadata map[string]any `json:"runtime_metadata"`
	}
	if err := json.Unmarshal(e.plat.Status(e.ws.ID).LastHeartbeat, &hb); err != nil {
		t.Fatal(err)
	}
	if hb.WorkspaceID != e.ws.ID || hb.RuntimeMetadata["idle_timeout_seconds"] != float64(120) {
		t.Errorf("heartbeat body: %s", e.plat.Status(e.ws.ID).LastHeartbeat)
	}

	// Nothing new: nothing published, never registered again.
	r = e.runOnce(p)
	if r.Published != 0 || r.Duplicates != 0 {
		t.Fatalf("third run: %+v", r)
	}
	if n := e.plat.Status(e.ws.ID).Registrations; n != 1 {
		t.Fatalf("registrations = %d, want 1", n)
	}
	// A new poller (a new one-shot process) does not register again either.
	e.runOnce(e.poller(poller.Config{}))
	if n := e.plat.Status(e.ws.ID).Registrations; n != 1 {
		t.Fatalf("registrations after a second process = %d, want 1", n)
	}
}

func TestColdStartBacklogWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backlog time.Duration
		want    int
	}{
		{"zero seeds at the newest row", 0, 0},
		{"window delivers the backlog", time.Hour, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.register(e.ws)
			for i := range 3 {
				e.sendCanvas(e.ws.ID, fmt.Sprint("old ", i))
			}
			p := e.poller(poller.Config{BacklogWindow: tc.backlog, PageLimit: 2})
			r := e.runOnce(p)
			ids := e.messageRowIDs(e.ws.ID)
			if r.Published != tc.want || r.Cursor != ids[len(ids)-1] {
				t.Fatalf("result %+v; want %d published, cursor at newest %s", r, tc.want, ids[len(ids)-1])
			}
			if tc.want > 0 {
				assertExactlyOnce(t, e.inbound(), ids)
			}
			e.sendCanvas(e.ws.ID, "new")
			r = e.runOnce(p)
			if r.Published != 1 {
				t.Fatalf("after cold start: %+v", r)
			}
		})
	}
}

func TestCrashBetweenPublishAndCursorSave(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	before, err := e.topo.Cursors.Get(ctx(t), e.ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
	}
	if r := e.runOnce(p); r.Published != 5 {
		t.Fatalf("first delivery: %+v", r)
	}
	// The state a crash after the publishes and before the cursor save
	// leaves: messages in the stream, the cursor where it was.
	if _, err := e.topo.Cursors.Put(ctx(t), e.ws.ID, before.Value()); err != nil {
		t.Fatal(err)
	}
	r := e.runOnce(e.poller(poller.Config{})) // the restarted process
	if r.Published != 0 || r.Duplicates != 5 {
		t.Fatalf("after restart: published %d duplicates %d, want 0 and 5", r.Published, r.Duplicates)
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
}

func TestTwoPollersOnOneWorkspacePublishOnce(t *testing.T) {
	e := newEnv(t)
	p1 := e.poller(poller.Config{PageLimit: 3})
	p2 := e.poller(poller.Config{PageLimit: 3})
	e.runOnce(p1)

	const n = 40
	c, cancel := context.WithCancel(ctx(t))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var dups int
	for _, p := range []*poller.Poller{p1, p2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.Err() == nil {
				res, _ := p.RunOnce(c)
				mu.Lock()
				dups += res.Workspaces[0].Duplicates
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		e.sendCanvas(e.ws.ID, fmt.Sprint("msg ", i))
	}
	waitFor(t, 20*time.Second, "all messages published", func() bool { return streamCount(t, e.topo.Inbound) >= n })
	cancel()
	wg.Wait()
	// Both settle on the same cursor and publish nothing more.
	e.runOnce(p1)
	e.runOnce(p2)
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
	t.Logf("duplicates dropped by de-duplication while racing: %d", dups)
}

func TestNATSRestartKeepsCursorAndDedup(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	e.sendCanvas(e.ws.ID, "before restart")
	e.runOnce(p)

	e.ns = e.ns.Restart(t)
	e.sendCanvas(e.ws.ID, "after restart")
	// The connection reconnects by itself; the first run may fail while
	// it does, and loses nothing.
	var last poller.WorkspaceResult
	waitFor(t, 20*time.Second, "a successful run after the restart", func() bool {
		res, err := p.RunOnce(ctx(t))
		last = res.Workspaces[0]
		return err == nil && res.Err() == nil
	})
	_ = last
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
	cur, err := e.topo.Cursors.Get(ctx(t), e.ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	ids := e.messageRowIDs(e.ws.ID)
	if !strings.Contains(string(cur.Value()), ids[len(ids)-1]) {
		t.Fatalf("cursor %s does not point at the newest row %s", cur.Value(), ids[len(ids)-1])
	}
}

func TestCursorLost410ResetsAndReseeds(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	e.sendCanvas(e.ws.ID, "one")
	e.runOnce(p)

	e.plat.PruneRows(e.ws.ID, time.Now().Add(time.Second)) // the retention sweep
	e.sendCanvas(e.ws.ID, "two")
	r := e.runOnce(p)
	if r.Published != 1 {
		t.Fatalf("after 410: %+v", r)
	}
	ids := e.messageRowIDs(e.ws.ID)
	if len(ids) != 1 || r.Cursor != ids[0] {
		t.Fatalf("cursor %q, rows %v", r.Cursor, ids)
	}
	if n := e.requests(http.MethodGet, "/activity"); n == 0 {
		t.Fatal("no activity request recorded")
	}
	got := e.inbound()
	if len(got) != 2 || got[1].Text != "two" {
		t.Fatalf("inbound: %d messages", len(got))
	}
	// Steady again.
	e.sendCanvas(e.ws.ID, "three")
	if r := e.runOnce(p); r.Published != 1 {
		t.Fatalf("after re-seed: %+v", r)
	}
}

func TestPausedWorkspaceIsNotFetchedButHeartbeats(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	e.plat.Pause(e.ws.ID)
	e.sendCanvas(e.ws.ID, "queued while paused")
	fetches := e.requests(http.MethodGet, "/activity")
	beats := e.plat.Status(e.ws.ID).Heartbeats

	r := e.runOnce(p)
	if !r.Paused || r.Published != 0 {
		t.Fatalf("paused run: %+v", r)
	}
	if got := e.requests(http.MethodGet, "/activity"); got != fetches {
		t.Fatalf("%d activity requests while paused", got-fetches)
	}
	if e.plat.Status(e.ws.ID).Heartbeats != beats+1 {
		t.Fatal("no heartbeat while paused")
	}
	if e.plat.Status(e.ws.ID).Registrations != 1 {
		t.Fatal("paused workspace was re-registered (that would un-pause it)")
	}
	st, err := p.Status(ctx(t))
	if err != nil || !st[0].Paused {
		t.Fatalf("status: %+v %v", st, err)
	}
}

func TestRemovedWorkspaceStopsWithoutReRegistering(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	e.plat.Delete(e.ws.ID)

	for i := range 3 {
		res, err := p.RunOnce(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Workspaces[0]
		if !r.Removed || !r.Stopped || !errors.Is(r.Err, molecule.ErrWorkspaceRemoved) || !errors.Is(res.Err(), molecule.ErrWorkspaceRemoved) {
			t.Fatalf("run %d: %+v", i, r)
		}
		if !strings.Contains(r.Err.Error(), "regenerate the workspace and token") {
			t.Fatalf("error does not tell the operator what to do: %v", r.Err)
		}
	}
	if n := e.requests(http.MethodPost, "/registry/register"); n != 1 {
		t.Fatalf("%d register requests, want the single first one", n)
	}
	st, err := p.Status(ctx(t))
	if err != nil || !st[0].Removed || st[0].Stopped != poller.StoppedRemoved {
		t.Fatalf("status: %+v %v", st, err)
	}
}

func TestRevokedTokenStopsWithADifferentError(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	bad := e.ws
	bad.Token = strings.Repeat("x", 43)
	p2 := e.poller(poller.Config{Workspaces: []*molecule.Client{e.client(bad)}})
	res, err := p2.RunOnce(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	r := res.Workspaces[0]
	if r.Removed || !r.Stopped || !errors.Is(r.Err, poller.ErrTokenRejected) || !errors.Is(r.Err, molecule.ErrUnauthorized) {
		t.Fatalf("result: %+v", r)
	}
	if n := e.requests(http.MethodPost, "/registry/register"); n != 1 {
		t.Fatalf("%d register requests", n)
	}
}

func TestOldPlatformRefusesPollMode(t *testing.T) {
	e := newEnv(t, moleculetest.WithGeneration(moleculetest.Gen2026_04))
	p := e.poller(poller.Config{})
	for i := range 3 {
		res, err := p.RunOnce(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Workspaces[0]
		if !r.Stopped || r.Generation != molecule.GenerationOld || !errors.Is(r.Err, molecule.ErrOldPlatform) {
			t.Fatalf("run %d: %+v", i, r)
		}
		if !strings.Contains(r.Err.Error(), "push ingress") {
			t.Fatalf("error does not point at push ingress: %v", r.Err)
		}
	}
	// One probe, remembered: no fetch loop, no register, no heartbeat.
	if n := e.requests(http.MethodGet, "/activity"); n != 1 {
		t.Fatalf("%d activity requests, want the single probe", n)
	}
	if n := e.requests(http.MethodPost, "/registry/"); n != 0 {
		t.Fatalf("%d registry requests on an OLD platform", n)
	}
	if streamCount(t, e.topo.Inbound) != 0 {
		t.Fatal("published from an OLD platform")
	}
	// Run stops at once too.
	rc, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	if err := p.Run(rc); !errors.Is(err, molecule.ErrOldPlatform) || rc.Err() != nil {
		t.Fatalf("Run: %v (ctx %v)", err, rc.Err())
	}
}

func TestRateLimited429BacksOffAndRecovers(t *testing.T) {
	e := newEnv(t)
	noRetry := func(c *molecule.Config) { c.MaxRetries = -1 }
	p := e.poller(poller.Config{Workspaces: []*molecule.Client{e.client(e.ws, noRetry)}})
	e.runOnce(p)
	e.sendCanvas(e.ws.ID, "through the limit")
	e.plat.InjectFault(moleculetest.Fault{
		Method: http.MethodGet, PathPrefix: "/workspaces/" + e.ws.ID + "/activity", Status: http.StatusTooManyRequests,
		Body: `{"error":"rate limit exceeded","retry_after":1}`, Header: http.Header{"Retry-After": {"1"}}, Count: 1,
	})
	start := time.Now()
	r := e.runOnce(p)
	if r.RateLimited != 1 || r.Published != 1 {
		t.Fatalf("result: %+v", r)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("did not honour Retry-After: next try after %s", waited)
	}
}

func TestMalformedRowIsDeadLetteredAndPassed(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p) // empty feed: seeded
	// Both rows are newer than the registration (the first run's), as real
	// rows sent to a registered poll-mode agent are.
	now := time.Now().UTC()
	bad := fmt.Sprintf(`{"id":"bad-row-1","activity_type":"a2a_receive","source_id":null,"method":"message/send","request_body":{"params":{"message":{"parts":"not an array"}}},"created_at":%q}`,
		now.Add(-time.Millisecond).Format(time.RFC3339Nano))
	good := fmt.Sprintf(`{"id":"11111111-2222-4333-8444-555555555555","workspace_id":%q,"activity_type":"a2a_receive","source_id":null,"target_id":%q,"method":"message/send","summary":"s","status":"ok","request_body":{"params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"fine"}]}}},"created_at":%q}`,
		e.ws.ID, e.ws.ID, now.Format(time.RFC3339Nano))
	e.plat.InjectFault(moleculetest.Fault{
		Method: http.MethodGet, PathPrefix: "/workspaces/" + e.ws.ID + "/activity", Status: 200,
		Body: "[" + good + "," + bad + "]", Count: 1,
	})
	res, err := p.RunOnce(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	r := res.Workspaces[0]
	if r.Malformed != 1 || r.Published != 1 || r.Err != nil {
		t.Fatalf("result: %+v", r)
	}
	dls := readStream(t, e.topo.DLQ, events.DecodeDeadLetter)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters", len(dls))
	}
	dl := dls[0]
	if dl.Stage != events.StagePoller || dl.Reason != events.ReasonMalformed || dl.ActivityID != "bad-row-1" ||
		dl.WorkspaceID != e.ws.ID || string(dl.Envelope) != bad || dl.Error == "" {
		t.Fatalf("dead letter: %+v", dl)
	}
	if got := e.inbound(); len(got) != 1 || got[0].Text != "fine" {
		t.Fatalf("inbound: %+v", got)
	}
}

func TestStatusReportsWithoutSecrets(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p)
	e.sendCanvas(e.ws.ID, "x")
	r := e.runOnce(p)
	st, err := p.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	s := st[0]
	if s.WorkspaceID != e.ws.ID || s.Generation != "new" || !s.Registered || s.DeliveryMode != "poll" || s.Cursor != r.Cursor ||
		s.Cursor == "" || s.LastPollAt.IsZero() || s.LastHeartbeatAt.IsZero() || s.HeartbeatStatus == "" || s.CursorRevision == 0 {
		t.Fatalf("status: %+v", s)
	}
	all, err := poller.ReadStatus(ctx(t), e.topo)
	if err != nil || len(all) != 1 || all[0].Cursor != s.Cursor {
		t.Fatalf("ReadStatus: %+v %v", all, err)
	}
	b, _ := json.Marshal(st)
	if strings.Contains(string(b), e.ws.Token) {
		t.Fatal("status contains the token")
	}
}

func TestConfigValidation(t *testing.T) {
	e := newEnv(t)
	c := e.client(e.ws)
	for _, tc := range []struct {
		name string
		cfg  poller.Config
	}{
		{"no workspace", poller.Config{}},
		{"duplicate workspace", poller.Config{Workspaces: []*molecule.Client{c, c}}},
		{"page limit over 500", poller.Config{Workspaces: []*molecule.Client{c}, PageLimit: 501}},
		{"heartbeat over 30s", poller.Config{Workspaces: []*molecule.Client{c}, HeartbeatInterval: time.Minute}},
		{"overlap beyond the duplicate window", poller.Config{Workspaces: []*molecule.Client{c}, OverlapWindow: 3 * time.Hour}},
		{"overlap every not shorter than the window", poller.Config{Workspaces: []*molecule.Client{c}, OverlapWindow: time.Minute, OverlapEvery: time.Minute}},
		{"negative backlog", poller.Config{Workspaces: []*molecule.Client{c}, BacklogWindow: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := poller.New(e.js, e.topo, tc.cfg); !errors.Is(err, poller.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := poller.New(e.js, e.topo, poller.Config{Workspaces: []*molecule.Client{c}}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestResultJSONShowsErrorAndGeneration(t *testing.T) {
	r := poller.Result{Workspaces: []poller.WorkspaceResult{{WorkspaceID: "w", Generation: molecule.GenerationOld, Err: errors.New("boom")}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"error":"boom"`) || !strings.Contains(s, `"generation":"old"`) || !strings.Contains(s, `"workspace_id":"w"`) {
		t.Fatalf("json: %s", b)
	}
}

// A message queued between the poller's registration and its first cursor
// seed was sent to a poll-mode agent — us — and must be delivered even with
// a backlog window of 0 (it used to be taken for old backlog).
func TestColdStartDeliversWhatArrivedSinceRegistration(t *testing.T) {
	e := newEnv(t)
	// Slow down the probe and the seed read so a message can arrive between
	// the registration and the seed.
	e.plat.InjectFault(moleculetest.Fault{Method: "GET", PathPrefix: "/workspaces/" + e.ws.ID + "/activity", Latency: 300 * time.Millisecond, Count: 2})
	p := e.poller(poller.Config{})
	done := make(chan poller.WorkspaceResult, 1)
	go func() { done <- e.runOnce(p) }()
	waitFor(t, 10*time.Second, "registration", func() bool { return e.plat.Status(e.ws.ID).DeliveryMode == "poll" })
	e.sendCanvas(e.ws.ID, "right after registration")
	r := <-done
	if r.Published != 1 {
		t.Fatalf("result %+v; the message queued after registration was not delivered", r)
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
}
