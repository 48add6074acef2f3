package molecule_test

// Protocol behaviour against the platform double (real HTTP on 127.0.0.1).

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// platform starts a double and stops it at the end of the test.
func platform(t *testing.T, opts ...moleculetest.Option) *moleculetest.Server {
	t.Helper()
	s := moleculetest.NewServer(opts...)
	t.Cleanup(s.Close)
	if s.URL() == "" {
		t.Fatal("moleculetest double has no URL (still a stub?)")
	}
	return s
}

// clientFor returns a client for workspace w of s with fast retries.
func clientFor(t *testing.T, s *moleculetest.Server, w moleculetest.Workspace, mod ...func(*molecule.Config)) *molecule.Client {
	t.Helper()
	cfg := molecule.Config{
		PlatformURL:       s.URL(),
		WorkspaceID:       w.ID,
		Token:             w.Token,
		RetryBaseInterval: 5 * time.Millisecond,
		MaxBackoff:        2 * time.Second,
		Logger:            slog.New(slog.DiscardHandler),
	}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := molecule.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// registered creates a workspace on s and registers it in poll mode.
func registered(t *testing.T, s *moleculetest.Server, name string) (moleculetest.Workspace, *molecule.Client) {
	t.Helper()
	w := s.CreateWorkspace(name)
	c := clientFor(t, s, w)
	if _, err := c.Register(context.Background(), molecule.RegisterRequest{}); err != nil {
		t.Fatalf("Register %s: %v", name, err)
	}
	return w, c
}

// peerAgent is a push agent's own endpoint: it records requests and
// answers a JSON-RPC result.
type peerAgent struct {
	srv  *wireServer
	mu   sync.Mutex
	hold chan struct{}
}

func newPeerAgent(t *testing.T) *peerAgent {
	p := &peerAgent{}
	p.srv = newWire(t, func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		hold := p.hold
		p.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":"1","result":{"kind":"message","role":"agent","parts":[{"kind":"text","text":"pong"}]}}`)
	})
	return p
}

// url is the agent's URL by host name (the platform refuses loopback IPs
// but allows "localhost").
func (p *peerAgent) url() string {
	u, _ := url.Parse(p.srv.URL)
	return "http://localhost:" + u.Port() + "/a2a"
}

func TestProbeDetectsGeneration(t *testing.T) {
	for _, tc := range []struct {
		gen  moleculetest.Generation
		want molecule.Generation
	}{
		{moleculetest.Gen2026_05, molecule.GenerationNew},
		{moleculetest.Gen2026_04, molecule.GenerationOld},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			s := platform(t, moleculetest.WithGeneration(tc.gen))
			c := clientFor(t, s, s.CreateWorkspace("a"))
			g, err := c.Probe(context.Background())
			if err != nil || g != tc.want {
				t.Fatalf("Probe = %v, %v; want %v", g, err, tc.want)
			}
		})
	}
}

func TestRegisterPollAndPush(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a := s.CreateWorkspace("a")
	ca := clientFor(t, s, a)
	res, err := ca.Register(ctx, molecule.RegisterRequest{AgentCard: map[string]any{"name": "a", "description": "poll agent"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "registered" || res.DeliveryMode != molecule.DeliveryPoll || res.PlatformInboundSecret == "" || res.AuthToken != "" {
		t.Fatalf("poll register = %+v", res)
	}
	if st := s.Status(a.ID); st.DeliveryMode != "poll" || st.Status != "online" || st.Registrations != 1 || st.URL != "" {
		t.Fatalf("double sees %+v", st)
	}

	peer := newPeerAgent(t)
	b := s.CreateWorkspace("b")
	res, err = clientFor(t, s, b).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: peer.url()})
	if err != nil || res.DeliveryMode != molecule.DeliveryPush {
		t.Fatalf("push register = %+v, %v", res, err)
	}
	if st := s.Status(b.ID); st.DeliveryMode != "push" || st.URL != peer.url() {
		t.Fatalf("double sees %+v", st)
	}
}

func TestRegisterOnOldPlatform(t *testing.T) {
	ctx := context.Background()
	s := platform(t, moleculetest.WithGeneration(moleculetest.Gen2026_04))
	a := s.CreateWorkspace("a")
	c := clientFor(t, s, a)
	// OLD has no poll mode: a URL-less register is a 400.
	_, err := c.Register(ctx, molecule.RegisterRequest{})
	if molecule.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("poll register on OLD = %v; want 400", err)
	}
	peer := newPeerAgent(t)
	res, err := c.Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: peer.url()})
	if err != nil || res.Status != "registered" || res.DeliveryMode != "" {
		t.Fatalf("push register on OLD = %+v, %v", res, err)
	}
}

func TestHeartbeatSendsFullBody(t *testing.T) {
	s := platform(t)
	a, c := registered(t, s, "a")
	res, err := c.Heartbeat(context.Background(), molecule.Heartbeat{
		ActiveTasks: 1, CurrentTask: "answering", UptimeSeconds: 42,
		Capabilities: molecule.Capabilities{Heartbeat: true}, IdleTimeoutSeconds: 120,
	})
	if err != nil || res.Status != "ok" || res.PlatformInboundSecret == "" {
		t.Fatalf("Heartbeat = %+v, %v", res, err)
	}
	st := s.Status(a.ID)
	if st.Heartbeats != 1 {
		t.Fatalf("double counted %d heartbeats", st.Heartbeats)
	}
	var body map[string]any
	if err := json.Unmarshal(st.LastHeartbeat, &body); err != nil {
		t.Fatalf("LastHeartbeat %s: %v", st.LastHeartbeat, err)
	}
	for _, k := range []string{"workspace_id", "active_tasks", "current_task", "uptime_seconds", "error_rate", "sample_error", "runtime_metadata"} {
		if _, ok := body[k]; !ok {
			t.Errorf("heartbeat lacks %q: %s", k, st.LastHeartbeat)
		}
	}
	if _, ok := body["runtime_state"]; ok {
		t.Errorf("empty runtime_state sent: %s", st.LastHeartbeat)
	}
	rm, _ := body["runtime_metadata"].(map[string]any)
	caps, _ := rm["capabilities"].(map[string]any)
	if len(caps) != 7 || caps["heartbeat"] != true || rm["idle_timeout_seconds"] != 120.0 {
		t.Fatalf("runtime_metadata = %v", rm)
	}
}

func TestStateFollowsPause(t *testing.T) {
	s := platform(t)
	a, c := registered(t, s, "a")
	st, err := c.State(context.Background())
	if err != nil || st.Status != "online" || st.Paused || st.Deleted || st.WorkspaceID != a.ID {
		t.Fatalf("State = %+v, %v", st, err)
	}
	s.Pause(a.ID)
	st, err = c.State(context.Background())
	if err != nil || !st.Paused || st.Status != "paused" {
		t.Fatalf("paused State = %+v, %v", st, err)
	}
}

func TestDeletedWorkspace(t *testing.T) {
	ctx := context.Background()
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_05, moleculetest.Gen2026_04} {
		t.Run(map[moleculetest.Generation]string{moleculetest.Gen2026_05: "new", moleculetest.Gen2026_04: "old"}[gen], func(t *testing.T) {
			s := platform(t, moleculetest.WithGeneration(gen))
			a := s.CreateWorkspace("a")
			c := clientFor(t, s, a)
			if removed, err := c.CheckRemoved(ctx); err != nil || removed {
				t.Fatalf("CheckRemoved before delete = %v, %v", removed, err)
			}
			s.Delete(a.ID)
			// A previously good token now gets 401 everywhere but heartbeat.
			if _, err := c.State(ctx); !errors.Is(err, molecule.ErrUnauthorized) {
				t.Fatalf("State after delete = %v; want ErrUnauthorized", err)
			}
			if _, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive"}); !errors.Is(err, molecule.ErrUnauthorized) {
				t.Fatalf("Activity after delete = %v; want ErrUnauthorized", err)
			}
			if _, err := c.Notify(ctx, "x", nil); !errors.Is(err, molecule.ErrUnauthorized) {
				t.Fatalf("Notify after delete = %v; want ErrUnauthorized", err)
			}
			if _, err := c.Heartbeat(ctx, molecule.Heartbeat{}); err != nil {
				t.Fatalf("Heartbeat after delete = %v; the platform answers 200", err)
			}
			info, err := c.Workspace(ctx, a.ID)
			if err != nil || !info.Removed {
				t.Fatalf("Workspace after delete = %+v, %v", info, err)
			}
			if gen == moleculetest.Gen2026_05 && (info.Hint == "" || info.RemovedAt.IsZero()) {
				t.Fatalf("NEW 410 not parsed: %+v", info)
			}
			if removed, err := c.CheckRemoved(ctx); err != nil || !removed {
				t.Fatalf("CheckRemoved = %v, %v", removed, err)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	s := platform(t)
	a, c := registered(t, s, "a")
	got, err := c.Secrets(context.Background())
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty Secrets = %v, %v", got, err)
	}
	s.SetSecret(a.ID, "MY_API_KEY", "sk-local-123")
	s.SetGlobalSecret("GLOBAL_FOO", "bar")
	got, err = c.Secrets(context.Background())
	if err != nil || got["MY_API_KEY"] != "sk-local-123" || got["GLOBAL_FOO"] != "bar" {
		t.Fatalf("Secrets = %v, %v", got, err)
	}
}

func TestPeers(t *testing.T) {
	s := platform(t)
	_, ca := registered(t, s, "alpha")
	b, cb := registered(t, s, "beta")
	s.CreateWorkspace("gamma")
	if err := cb.UpdateCard(context.Background(), map[string]any{"name": "beta", "description": "updated card"}); err != nil {
		t.Fatalf("UpdateCard: %v", err)
	}
	peers, err := ca.Peers(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range peers {
		names[p.Name] = true
	}
	if !names["beta"] || !names["gamma"] || names["alpha"] {
		t.Fatalf("peers = %+v", peers)
	}
	peers, err = ca.Peers(context.Background(), "BET")
	if err != nil || len(peers) != 1 || peers[0].ID != b.ID {
		t.Fatalf("Peers(q) = %+v, %v", peers, err)
	}
	if !strings.Contains(string(peers[0].AgentCard), "updated card") {
		t.Fatalf("peer card = %s; UpdateCard not applied", peers[0].AgentCard)
	}
}

func TestDiscoverIsCached(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, ca := registered(t, s, "a")
	peer := newPeerAgent(t)
	b := s.CreateWorkspace("b")
	if _, err := clientFor(t, s, b).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: peer.url()}); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		for _, r := range s.Requests() {
			if strings.HasPrefix(r.Path, "/registry/discover/") {
				n++
				if r.Header.Get("X-Workspace-Id") != a.ID {
					t.Errorf("discover without X-Workspace-ID: %v", r.Header)
				}
			}
		}
		return n
	}
	for range 3 {
		d, err := ca.Discover(ctx, b.ID)
		if err != nil || d.URL != peer.url() || d.ID != b.ID {
			t.Fatalf("Discover = %+v, %v", d, err)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("%d discover requests; the cache should answer", n)
	}
	ca.InvalidateDiscovery(b.ID)
	if _, err := ca.Discover(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d discover requests after invalidation, want 2", n)
	}
	// A poll-mode peer has no URL (503 workspace not available): not
	// cached, asked every time.
	c := s.CreateWorkspace("c")
	once := clientFor(t, s, a, func(c *molecule.Config) { c.MaxRetries = -1 })
	for range 2 {
		if d, err := once.Discover(ctx, c.ID); err == nil && strings.HasPrefix(d.URL, "http") {
			t.Fatalf("URL-less peer discovered as %+v", d)
		}
	}
	if n := count(); n != 4 {
		t.Fatalf("%d discover requests; URL-less answers must not be cached", n)
	}

	// A TTL cache expires.
	short := clientFor(t, s, a, func(c *molecule.Config) { c.DiscoverTTL = time.Nanosecond })
	for range 2 {
		if _, err := short.Discover(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 6 {
		t.Fatalf("%d discover requests; an expired entry must be asked again", n)
	}
}

// ids returns the row ids of a page.
func ids(p *molecule.ActivityPage) []string {
	var out []string
	for _, r := range p.Rows {
		out = append(out, r.ID)
	}
	return out
}

// sendCanvas sends n canvas messages to w and returns nothing until each is
// queued.
func sendCanvas(t *testing.T, s *moleculetest.Server, to string, texts ...string) {
	t.Helper()
	for _, text := range texts {
		status, body, err := s.SendCanvas(context.Background(), to, text)
		if err != nil || status != 200 {
			t.Fatalf("SendCanvas = %d %s %v", status, body, err)
		}
	}
}

func TestActivityOrderingAndCursor(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, c := registered(t, s, "a")
	sendCanvas(t, s, a.ID, "one", "two", "three")

	// No cursor: the server answers newest first; the client turns it.
	page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 3 || !page.Descending || page.Full || page.Limit != 100 || !page.RateLimit.Known {
		t.Fatalf("page = %+v", page)
	}
	for i := 1; i < len(page.Rows); i++ {
		if page.Rows[i].CreatedAt.Before(page.Rows[i-1].CreatedAt) {
			t.Fatalf("rows not oldest first: %v", ids(page))
		}
	}
	var first map[string]any
	json.Unmarshal(page.Rows[0].JSON, &first)
	if !strings.Contains(string(page.Rows[0].JSON), "one") {
		t.Fatalf("oldest row is not the first message: %s", page.Rows[0].JSON)
	}
	all := ids(page)

	// With the oldest as cursor: ascending, strictly after.
	page, err = c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", SinceID: all[0], Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page.Descending || !page.Full || len(page.Rows) != 1 || page.Rows[0].ID != all[1] {
		t.Fatalf("since_id page = %v (desc %v, full %v); want [%s]", ids(page), page.Descending, page.Full, all[1])
	}
	page, err = c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", SinceID: page.Newest().ID})
	if err != nil || len(page.Rows) != 1 || page.Rows[0].ID != all[2] {
		t.Fatalf("next page = %v, %v", page, err)
	}
}

func TestActivityOnOldPlatformIgnoresCursor(t *testing.T) {
	ctx := context.Background()
	s := platform(t, moleculetest.WithGeneration(moleculetest.Gen2026_04))
	a := s.CreateWorkspace("a")
	c := clientFor(t, s, a)
	if _, err := c.Notify(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Notify(ctx, "two", nil); err != nil {
		t.Fatal(err)
	}
	page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", SinceID: molecule.ZeroCursor})
	if err != nil {
		t.Fatalf("OLD answered %v", err)
	}
	if len(page.Rows) != 2 || !page.Descending || !strings.Contains(string(page.Newest().JSON), "two") {
		t.Fatalf("OLD page = %v desc=%v", ids(page), page.Descending)
	}
}

func TestActivityCursorLost(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, c := registered(t, s, "a")
	_, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", SinceID: "6af0b425-9c93-48bf-ac04-a9c98df27fdb"})
	if !errors.Is(err, molecule.ErrCursorLost) {
		t.Fatalf("unknown cursor = %v; want ErrCursorLost", err)
	}
	sendCanvas(t, s, a.ID, "old")
	page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive"})
	if err != nil || len(page.Rows) != 1 {
		t.Fatalf("page = %v, %v", page, err)
	}
	s.PruneRows(a.ID, time.Now().Add(time.Hour))
	_, err = c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", SinceID: page.Rows[0].ID})
	if !errors.Is(err, molecule.ErrCursorLost) {
		t.Fatalf("pruned cursor = %v; want ErrCursorLost", err)
	}
}

func TestRateLimitedGETHonoursRetryAfter(t *testing.T) {
	ctx := context.Background()
	s := platform(t, moleculetest.WithRateLimit(2, time.Second))
	a := s.CreateWorkspace("a")
	noRetry := clientFor(t, s, a, func(c *molecule.Config) { c.MaxRetries = -1 })
	for range 2 {
		if _, err := noRetry.State(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err := noRetry.State(ctx)
	if !errors.Is(err, molecule.ErrRateLimited) || molecule.RetryAfterOf(err) <= 0 {
		t.Fatalf("third call = %v; want ErrRateLimited with Retry-After", err)
	}
	if rl := noRetry.RateLimit(); !rl.Known || rl.Limit != 2 || rl.Remaining != 0 {
		t.Fatalf("RateLimit = %+v", rl)
	}
	// The retrying client waits out the window and succeeds.
	c := clientFor(t, s, a)
	start := time.Now()
	st, err := c.State(ctx)
	if err != nil || st.WorkspaceID != a.ID {
		t.Fatalf("retried State = %+v, %v", st, err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatalf("retry did not wait (%v)", time.Since(start))
	}
}

func TestInjectedRetryAfterIsHonoured(t *testing.T) {
	s := platform(t)
	a, c := registered(t, s, "a")
	s.InjectFault(moleculetest.Fault{
		Method: http.MethodGet, PathPrefix: "/workspaces/" + a.ID + "/state",
		Status: 429, Body: `{"error":"rate limit exceeded","retry_after":1}`,
		Header: http.Header{"Retry-After": {"1"}}, Count: 1,
	})
	start := time.Now()
	if _, err := c.State(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("waited %v; Retry-After 1 s not honoured", waited)
	}
}

func TestFaultsAreClassified(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, c := registered(t, s, "a")
	prefix := "/workspaces/" + a.ID + "/activity"

	s.InjectFault(moleculetest.Fault{PathPrefix: prefix, Drop: true, Count: 1})
	if _, err := c.Activity(ctx, molecule.ActivityQuery{}); err != nil {
		t.Fatalf("dropped connection not retried: %v", err)
	}
	s.InjectFault(moleculetest.Fault{PathPrefix: prefix, Malformed: true, Count: 1})
	if _, err := c.Activity(ctx, molecule.ActivityQuery{}); !errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Fatalf("malformed body = %v", err)
	}
	s.InjectFault(moleculetest.Fault{PathPrefix: prefix, Status: 503, Body: `{"error":"platform datastore unavailable","code":"platform_unavailable"}`})
	_, err := c.Activity(ctx, molecule.ActivityQuery{})
	var ae *molecule.APIError
	if !errors.Is(err, molecule.ErrPlatformUnavailable) || !errors.As(err, &ae) || ae.Code != "platform_unavailable" {
		t.Fatalf("503 = %v", err)
	}
	s.ClearFaults()
	s.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + a.ID + "/notify", Status: 503, Count: 1})
	if _, err := c.Notify(ctx, "once", nil); !errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Fatalf("notify 503 = %v", err)
	}
	if n := len(s.Notifications(a.ID)); n != 0 {
		t.Fatalf("%d notifications recorded after a failed notify", n)
	}
}

func TestNotify(t *testing.T) {
	s := platform(t)
	a, c := registered(t, s, "a")
	att := []molecule.Attachment{{URI: "workspace:/out/report.pdf", Name: "report.pdf", MimeType: "application/pdf", Size: 10}}
	res, err := c.Notify(context.Background(), "Hello user", att)
	if err != nil || res.Status != "sent" {
		t.Fatalf("Notify = %+v, %v", res, err)
	}
	ns := s.Notifications(a.ID)
	if len(ns) != 1 || ns[0].Message != "Hello user" || !strings.Contains(string(ns[0].Attachments), "report.pdf") {
		t.Fatalf("notifications = %+v", ns)
	}
}

func TestSendA2A(t *testing.T) {
	ctx := context.Background()
	s := platform(t, moleculetest.WithPushTimeout(200*time.Millisecond))
	a, ca := registered(t, s, "a")
	b, _ := registered(t, s, "b")

	// Poll-mode peer: 200 queued, with our identity.
	res, err := ca.SendA2A(ctx, molecule.A2AMessage{To: b.ID, Text: "hi b", MessageID: "reply-1", InReplyTo: "act-1"})
	if err != nil || !res.Queued || res.StatusCode != 200 || res.DeliveryMode != "poll" {
		t.Fatalf("SendA2A to poll peer = %+v, %v", res, err)
	}
	calls := s.A2ACalls(b.ID)
	if len(calls) != 1 || calls[0].CallerID != a.ID || !strings.Contains(string(calls[0].Body), `"in_reply_to":"act-1"`) ||
		!strings.Contains(string(calls[0].Body), `"messageId":"reply-1"`) {
		t.Fatalf("A2A calls = %+v", calls)
	}
	rows := s.Rows(b.ID)
	if len(rows) == 0 || !strings.Contains(string(rows[len(rows)-1]), a.ID) {
		t.Fatalf("no row with our source_id on the peer's feed: %s", rows)
	}

	// Push peer answering at once: its JSON-RPC answer is the result.
	peer := newPeerAgent(t)
	p := s.CreateWorkspace("p")
	if _, err := clientFor(t, s, p).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: peer.url()}); err != nil {
		t.Fatal(err)
	}
	res, err = ca.SendA2A(ctx, molecule.A2AMessage{To: p.ID, Text: "ping", MessageID: "m-2"})
	if err != nil || res.Queued || res.StatusCode != 200 || !strings.Contains(string(res.Body), "pong") {
		t.Fatalf("SendA2A to push peer = %+v %s, %v", res, res.Body, err)
	}

	// Push peer that does not answer in time: 202 queued.
	hold := make(chan struct{})
	defer close(hold)
	peer.mu.Lock()
	peer.hold = hold
	peer.mu.Unlock()
	res, err = ca.SendA2A(ctx, molecule.A2AMessage{To: p.ID, Text: "slow", MessageID: "m-3"})
	if err != nil || !res.Queued || res.StatusCode != 202 {
		t.Fatalf("SendA2A to busy push peer = %+v, %v", res, err)
	}
}

func TestCallPeerNeverSendsTheTokenToThePeer(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, ca := registered(t, s, "a")
	peer := newPeerAgent(t)
	p := s.CreateWorkspace("p")
	if _, err := clientFor(t, s, p).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: peer.url()}); err != nil {
		t.Fatal(err)
	}
	res, err := ca.CallPeer(ctx, molecule.A2AMessage{To: p.ID, Text: "direct", MessageID: "m-1"})
	if err != nil || !strings.Contains(string(res.Body), "pong") {
		t.Fatalf("CallPeer = %+v, %v", res, err)
	}
	reqs := peer.srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("peer got %d requests, want 1 (direct)", len(reqs))
	}
	r := reqs[0]
	for k, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, a.Token) {
				t.Fatalf("platform token sent to the peer in %s", k)
			}
		}
	}
	if r.Header.Get("Authorization") != "" || strings.Contains(string(r.Body), a.Token) {
		t.Fatalf("peer request carries credentials: %v", r.Header)
	}
	if r.Header.Get("X-Workspace-Id") != a.ID || !strings.Contains(string(r.Body), `"text":"direct"`) {
		t.Fatalf("peer request = %v %s", r.Header, r.Body)
	}
	if n := len(s.A2ACalls(p.ID)); n != 0 {
		t.Fatalf("direct call also went through the platform (%d)", n)
	}

	// A poll-mode peer has no URL: the platform proxy carries it.
	b, _ := registered(t, s, "b")
	res, err = ca.CallPeer(ctx, molecule.A2AMessage{To: b.ID, Text: "via platform", MessageID: "m-2"})
	if err != nil || !res.Queued {
		t.Fatalf("CallPeer to poll peer = %+v, %v", res, err)
	}
	if n := len(s.A2ACalls(b.ID)); n != 1 {
		t.Fatalf("%d platform calls to the poll peer, want 1", n)
	}
}

func TestStreamEventsSeesActivityLogged(t *testing.T) {
	s := platform(t)
	a, c := registered(t, s, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan molecule.Event, 16)
	done := make(chan error, 1)
	go func() { done <- c.StreamEvents(ctx, func(e molecule.Event) { events <- e }) }()

	// Nothing says when the double has subscribed the stream: queue a
	// message, and again every 200 ms, until its event arrives.
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		sendCanvas(t, s, a.ID, "wake up")
		select {
		case e := <-events:
			if e.Type == "ACTIVITY_LOGGED" {
				if !strings.Contains(string(e.Data), "a2a_receive") || e.Timestamp == 0 {
					t.Fatalf("event = %+v", e)
				}
				got = true
			}
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no ACTIVITY_LOGGED event")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("StreamEvents = %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StreamEvents did not return")
	}
}

func TestTenantHeaders(t *testing.T) {
	ctx := context.Background()
	s := platform(t, moleculetest.WithOrgID("org-7"))
	a := s.CreateWorkspace("a")
	without := clientFor(t, s, a)
	// register and heartbeat are exempt; the rest is not routed.
	if _, err := without.Register(ctx, molecule.RegisterRequest{}); err != nil {
		t.Fatalf("exempt register = %v", err)
	}
	if _, err := without.State(ctx); !errors.Is(err, molecule.ErrTenantRouting) {
		t.Fatalf("State without org = %v; want ErrTenantRouting", err)
	}
	with := clientFor(t, s, a, func(c *molecule.Config) { c.OrgID = "org-7" })
	if _, err := with.State(ctx); err != nil {
		t.Fatalf("State with org = %v", err)
	}
	if _, err := with.Heartbeat(ctx, molecule.Heartbeat{}); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	last := reqs[len(reqs)-1]
	if last.Path != "/registry/heartbeat" || last.Header.Get("X-Molecule-Org-Id") != "org-7" || last.Header.Get("Origin") != s.URL() {
		t.Fatalf("heartbeat headers = %v", last.Header)
	}
}

func TestRequestCountsByStatus(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("counted")
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.State(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Notify(ctx, "", nil); err == nil {
		t.Fatal("empty notify accepted client-side or by the double")
	}
	srv.InjectFault(moleculetest.Fault{Method: "GET", PathPrefix: "/workspaces/" + ws.ID + "/state", Status: 503, Count: 1})
	_, _ = c.State(ctx)
	got := c.RequestCounts()
	if got[200] != 1 || got[503] != 1 {
		t.Fatalf("counts %v; want one 200 and one 503", got)
	}
}

func TestTakeBudgetKeepsTheReserve(t *testing.T) {
	srv := moleculetest.NewServer(moleculetest.WithRateLimit(5, time.Minute))
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("budget")
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.TakeBudget(2); d != 0 {
		t.Fatalf("wait %s before anything is known", d)
	}
	if _, err := c.State(context.Background()); err != nil { // the platform says 4 remain
		t.Fatal(err)
	}
	// Two callers may take a request each (4 → 3 → 2) before anyone sends;
	// asking BudgetWait spends nothing.
	for i := range 2 {
		if d := c.BudgetWait(2); d != 0 {
			t.Fatalf("budget wait before take %d: %s", i, d)
		}
		if d := c.TakeBudget(2); d != 0 {
			t.Fatalf("take %d: wait %s", i, d)
		}
	}
	if d := c.BudgetWait(2); d < 50*time.Second || d > 62*time.Second {
		t.Fatalf("budget wait %s at the reserve; want the rest of the 60 s window", d)
	}
	if d := c.TakeBudget(2); d < 50*time.Second || d > 62*time.Second {
		t.Fatalf("wait %s at the reserve; want the rest of the 60 s window", d)
	}
}

func TestActivityRowsCarryTheirMethod(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("methods")
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Register(ctx, molecule.RegisterRequest{}); err != nil {
		t.Fatal(err)
	}
	if code, _, err := srv.SendCanvas(ctx, ws.ID, "hi"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	if _, err := c.Notify(ctx, "hello", nil); err != nil {
		t.Fatal(err)
	}
	page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 2 || page.Rows[0].Method != "message/send" || page.Rows[1].Method != "notify" {
		t.Fatalf("rows %+v", page.Rows)
	}
}
