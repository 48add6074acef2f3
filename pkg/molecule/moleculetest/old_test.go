package moleculetest_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// agent is a push-mode agent endpoint that records what it received.
type agent struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []*http.Request
	bodies [][]byte
	reply  func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newAgent(t *testing.T, reply func(w http.ResponseWriter, r *http.Request, body []byte)) *agent {
	t.Helper()
	a := &agent{reply: reply}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.got = append(a.got, r)
		a.bodies = append(a.bodies, b)
		a.mu.Unlock()
		a.reply(w, r, b)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// localhostURL rewrites 127.0.0.1 to localhost: the platform refuses
// loopback IP literals but allows the name.
func (a *agent) localhostURL(path string) string {
	return strings.Replace(a.srv.URL, "127.0.0.1", "localhost", 1) + path
}

func echoReply(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req map[string]any
	_ = json.Unmarshal(body, &req)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":`+mustJSON(req["id"])+`,"jsonrpc":"2.0","result":{"kind":"message","role":"agent","messageId":"reply-1","parts":[{"kind":"text","text":"echo"}]}}`)
}

func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

func registerOld(t *testing.T, s *moleculetest.Server, w moleculetest.Workspace, url string) {
	t.Helper()
	r := call(t, s, "POST", "/registry/register", bearerH(w.Token), `{"id":"`+w.ID+`","url":"`+url+`","agent_card":{"name":"`+w.Name+`"}}`)
	if r.status != 200 {
		t.Fatalf("register %s: %d %s", url, r.status, r.body)
	}
}

// docs/protocol.md §1 (OLD) register.
func TestRegisterOld(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04))
	a := s.CreateWorkspace("ext-agent-A")
	bad := `{"error":"invalid request body"}`
	reg := func(url string) string {
		return `{"id":"` + a.ID + `","url":"` + url + `","agent_card":{"name":"x"}}`
	}
	cases := []struct {
		name   string
		h      http.Header
		body   string
		status int
		want   string
	}{
		{"remote scheme", bearerH(a.Token), reg("remote://no-inbound"), 400, bad},
		{"loopback literal", bearerH(a.Token), reg("http://127.0.0.1:9101"), 400, bad},
		{"link-local literal", bearerH(a.Token), reg("http://169.254.169.254/"), 400, bad},
		{"no url", bearerH(a.Token), `{"id":"` + a.ID + `","agent_card":{}}`, 400, bad},
		{"poll mode does not help", bearerH(a.Token), `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{}}`, 400, bad},
		{"no agent_card", bearerH(a.Token), `{"id":"` + a.ID + `","url":"http://localhost:9101"}`, 400, bad},
		{"no id", bearerH(a.Token), `{"url":"http://localhost:9101","agent_card":{}}`, 400, bad},
		{"no bearer", nil, reg("http://localhost:9101"), 401, `{"error":"missing workspace auth token"}`},
		{"wrong bearer", bearerH("wrong"), reg("http://localhost:9101"), 401, `{"error":"invalid workspace auth token"}`},
		{"localhost allowed", bearerH(a.Token), reg("http://localhost:9101"), 200, `{"status":"registered"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, call(t, s, "POST", "/registry/register", tc.h, tc.body), tc.status, tc.want)
		})
	}
	st := s.Status(a.ID)
	if st.Status != "online" || st.URL != "http://localhost:9101" || st.DeliveryMode != "push" {
		t.Errorf("status %+v", st)
	}
	expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`), 200, `{"status":"ok"}`)
	// An unknown id registers and gets a token once.
	id := "0b6f3c1e-2d4a-4b8e-9f10-1a2b3c4d5e6f"
	r := call(t, s, "POST", "/registry/register", nil, `{"id":"`+id+`","url":"http://localhost:1","agent_card":{}}`)
	if r.status != 200 || !tokenRE.MatchString(r.json(t)["auth_token"].(string)) || len(r.json(t)) != 2 {
		t.Errorf("unknown id: %d %s", r.status, r.body)
	}
}

// docs/protocol.md §1 (OLD) activity: DESC always, since_id and friends ignored.
func TestActivityOld(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04))
	a := s.CreateWorkspace("ext-agent-A")
	for i := 0; i < 3; i++ {
		call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"n`+strconv.Itoa(i)+`"}`)
	}
	p := "/workspaces/" + a.ID + "/activity?"
	base := call(t, s, "GET", p, bearerH(a.Token), "")
	rows := base.array(t)
	if len(rows) != 3 || rows[0]["response_body"].(map[string]any)["result"] != "n2" {
		t.Fatalf("not DESC: %s", base.body)
	}
	if !strings.HasPrefix(string(base.body), `[{"id":`) {
		t.Errorf("OLD key order not kept: %.40s", base.body)
	}
	for _, q := range []string{
		"since_id=" + rows[0]["id"].(string), "since_id=" + rows[2]["id"].(string), "since_id=garbage",
		"type=a2a_receive&since_id=00000000-0000-0000-0000-000000000000",
		"peer_id=bad", "before_ts=bad", "since_secs=abc",
	} {
		t.Run(q, func(t *testing.T) {
			r := call(t, s, "GET", p+q, bearerH(a.Token), "")
			if r.status != 200 || string(r.body) != string(base.body) {
				t.Errorf("%d %s", r.status, r.body)
			}
		})
	}
	expect(t, call(t, s, "GET", p+"limit=1", bearerH(a.Token), ""), 200, "")
	if n := len(call(t, s, "GET", p+"limit=1", bearerH(a.Token), "").array(t)); n != 1 {
		t.Errorf("limit ignored")
	}
	expect(t, call(t, s, "GET", p+"source=user", bearerH(a.Token), ""), 400, `{"error":"source must be 'canvas' or 'agent'"}`)
}

// docs/protocol.md §1 (OLD) canvas and peer messages through push delivery.
func TestPushDeliveryOld(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04), moleculetest.WithPushTimeout(300*time.Millisecond))
	ag := newAgent(t, echoReply)
	a, b := s.CreateWorkspace("ext-agent-A"), s.CreateWorkspace("ext-agent-B")
	registerOld(t, s, a, ag.localhostURL("/"))
	registerOld(t, s, b, ag.localhostURL("/b"))

	// Canvas: relayed verbatim, row with response_body.
	body := `{"jsonrpc":"2.0","id":"req-1","method":"message/send","params":{"message":{"role":"user","messageId":"m-canvas-1","parts":[{"kind":"text","text":"hello from canvas"}]}}}`
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", bearerH(b.Token), body)
	expect(t, r, 200, `{"id":"req-1","jsonrpc":"2.0","result":{"kind":"message","role":"agent","messageId":"reply-1","parts":[{"kind":"text","text":"echo"}]}}`)
	ag.mu.Lock()
	fwd, got := ag.bodies[0], ag.got[0]
	ag.mu.Unlock()
	if got.URL.Path != "/" || got.Header.Get("Authorization") != "" || got.Header.Get("X-Workspace-ID") != "" || got.Header.Get("Content-Type") != "application/json" {
		t.Errorf("forwarded %s %v", got.URL.Path, got.Header)
	}
	if string(fwd) != compact(`{"id":"req-1","jsonrpc":"2.0","method":"message/send","params":{"message":{"messageId":"m-canvas-1","parts":[{"kind":"text","text":"hello from canvas"}],"role":"user"}}}`) {
		t.Errorf("forwarded body not sorted: %s", fwd)
	}
	rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)
	if len(rows) != 1 {
		t.Fatalf("rows %d", len(rows))
	}
	row := rows[0]
	if row["source_id"] != nil || row["status"] != "ok" || row["summary"] != "message/send → ext-agent-A" || row["error_detail"] != nil {
		t.Errorf("row %v", row)
	}
	if _, ok := row["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms %v", row["duration_ms"])
	}
	if rb := row["response_body"].(map[string]any); rb["id"] != "req-1" {
		t.Errorf("response_body %v", rb)
	}

	// Peer A -> B: path as registered, row on B only.
	r = call(t, s, "POST", "/workspaces/"+b.ID+"/a2a", hdr("Authorization", "Bearer "+a.Token, "X-Workspace-ID", a.ID), `{"method":"message/send","params":{"message":{"role":"user","parts":[]}}}`)
	if r.status != 200 {
		t.Fatalf("peer: %d %s", r.status, r.body)
	}
	ag.mu.Lock()
	if ag.got[1].URL.Path != "/b" {
		t.Errorf("path %s", ag.got[1].URL.Path)
	}
	var wrapped map[string]any
	_ = json.Unmarshal(ag.bodies[1], &wrapped)
	ag.mu.Unlock()
	if wrapped["jsonrpc"] != "2.0" || wrapped["id"] == nil || wrapped["params"].(map[string]any)["message"].(map[string]any)["messageId"] == nil {
		t.Errorf("not normalised: %v", wrapped)
	}
	if n := len(s.Rows(a.ID)); n != 1 {
		t.Errorf("caller got rows: %d", n)
	}
	var brow map[string]any
	_ = json.Unmarshal(s.Rows(b.ID)[0], &brow)
	if brow["source_id"] != a.ID || brow["target_id"] != b.ID {
		t.Errorf("peer row %v", brow)
	}
	// OLD ignores the bearer without X-Workspace-ID: canvas.
	if calls := s.A2ACalls(a.ID); len(calls) != 1 || calls[0].CallerID != "" || calls[0].Status != 200 {
		t.Errorf("calls %+v", calls)
	}
}

func TestPushFailuresOld(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04), moleculetest.WithPushTimeout(200*time.Millisecond))
	hang := hangingAgent(t)

	closed := s.CreateWorkspace("ext-agent-D")
	registerOld(t, s, closed, "http://localhost:"+strconv.Itoa(closedPort(t)))
	busy := s.CreateWorkspace("ext-agent-H")
	busyURL := hang.localhostURL("/")
	registerOld(t, s, busy, busyURL)
	nourl := s.CreateWorkspace("ext-agent-N")
	r := call(t, s, "POST", "/workspaces", bearerH(s.AdminToken()), `{"name":"ext-agent-C","external":true,"url":"remote://no-inbound"}`)
	if r.status != 201 || r.json(t)["status"] != "online" {
		t.Fatalf("create remote: %d %s", r.status, r.body)
	}
	remote := r.json(t)["id"].(string)

	cases := []struct {
		name   string
		to     string
		status int
		want   string
		row    string // "" no row; else expected status of the row
		detail string
	}{
		{"closed port", closed.ID, 502, `{"error":"failed to reach workspace agent"}`, "error", "connect: connection refused"},
		{"no URL", nourl.ID, 503, `{"error":"workspace has no URL","status":"provisioning"}`, "", ""},
		{"remote URL", remote, 502, `{"error":"workspace URL is not publicly routable"}`, "", ""},
		{"agent never answers", busy.ID, 202, "", "error", `Post "` + busyURL + `": context canceled`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := call(t, s, "POST", "/workspaces/"+tc.to+"/a2a", nil, canvasMsg)
			expect(t, r, tc.status, tc.want)
			rows := s.Rows(tc.to)
			if tc.row == "" {
				if len(rows) != 0 {
					t.Errorf("row written: %s", rows[0])
				}
				return
			}
			if len(rows) != 1 {
				t.Fatalf("rows %d", len(rows))
			}
			var row map[string]any
			_ = json.Unmarshal(rows[0], &row)
			if _, has := row["response_body"]; has || row["status"] != tc.row || !strings.Contains(row["error_detail"].(string), tc.detail) ||
				!strings.HasPrefix(row["summary"].(string), "A2A request to ") || row["request_body"] == nil {
				t.Errorf("row %v", row)
			}
			if tc.status == 202 {
				m := r.json(t)
				if m["queued"] != true || m["queue_depth"] != 1.0 || m["queue_id"] == "" || m["message"] != "workspace agent busy — request queued, will dispatch when capacity available" {
					t.Errorf("202 body %v", m)
				}
				if d := time.Since(start); d < 200*time.Millisecond {
					t.Errorf("202 after %v, before the push timeout", d)
				}
				if row["duration_ms"].(float64) < 150 {
					t.Errorf("duration_ms %v", row["duration_ms"])
				}
			}
		})
	}
	// The same messageId queues idempotently.
	r = call(t, s, "POST", "/workspaces/"+busy.ID+"/a2a", nil, canvasMsg)
	if r.status != 202 || r.json(t)["queue_depth"] != 1.0 {
		t.Errorf("re-queue: %d %s", r.status, r.body)
	}
}

func TestPushIdleTimeoutFromHeartbeat(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04), moleculetest.WithPushTimeout(time.Hour))
	hang := hangingAgent(t)
	a := s.CreateWorkspace("ext-agent-A")
	registerOld(t, s, a, hang.localhostURL("/"))
	call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`","runtime_metadata":{"capabilities":{"heartbeat":true},"idle_timeout_seconds":1}}`)
	start := time.Now()
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", nil, canvasMsg)
	if r.status != 202 || time.Since(start) > 10*time.Second {
		t.Errorf("%d after %v", r.status, time.Since(start))
	}
}

// X-Timeout bounds the dispatch: the platform gives up on the agent after
// that many seconds and queues the message (202), as on its idle timeout.
func TestPushXTimeout(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04), moleculetest.WithPushTimeout(time.Hour))
	hang := hangingAgent(t)
	a, b := s.CreateWorkspace("ext-agent-A"), s.CreateWorkspace("ext-agent-B")
	registerOld(t, s, a, hang.localhostURL("/"))
	start := time.Now()
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID, "X-Timeout", "1"), canvasMsg)
	if d := time.Since(start); r.status != 202 || d < time.Second || d > 10*time.Second {
		t.Errorf("%d after %v; want 202 after the 1 s X-Timeout", r.status, d)
	}
}

func TestPushModeOnNew(t *testing.T) {
	s := newServer(t)
	ag := newAgent(t, echoReply)
	a := s.CreateWorkspace("ext-A")
	r := call(t, s, "POST", "/registry/register", bearerH(a.Token), `{"id":"`+a.ID+`","url":"`+ag.localhostURL("/")+`","agent_card":{}}`)
	expect(t, r, 200, `{"delivery_mode":"push","platform_inbound_secret":"`+s.InboundSecret(a.ID)+`","status":"registered"}`)
	r = call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), canvasMsg)
	if r.status != 200 || r.json(t)["jsonrpc"] != "2.0" {
		t.Errorf("push on NEW: %d %s", r.status, r.body)
	}
	expect(t, call(t, s, "POST", "/registry/register", bearerH(a.Token), `{"id":"`+a.ID+`","delivery_mode":"push","url":"http://127.0.0.1:1","agent_card":{}}`), 400, "")
}

func TestGetWorkspaceRemovedOld(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_04))
	a := s.CreateWorkspace("ext-agent-A")
	s.Delete(a.ID)
	r := call(t, s, "GET", "/workspaces/"+a.ID, nil, "")
	if r.status != 200 || r.json(t)["status"] != "removed" {
		t.Errorf("%d %s", r.status, r.body)
	}
}

func TestSendHelpers(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	ctx := context.Background()
	code, body, err := s.SendCanvas(ctx, a.ID, "hello")
	if err != nil || code != 200 || !jsonEqual(t, body, `{"delivery_mode":"poll","method":"message/send","status":"queued"}`) {
		t.Fatalf("canvas %d %s %v", code, body, err)
	}
	if code, _, _ := s.SendPeer(ctx, b, a.ID, "peer"); code != 200 {
		t.Fatalf("peer %d", code)
	}
	calls := s.A2ACalls(a.ID)
	if len(calls) != 2 || calls[0].CallerID != "" || calls[1].CallerID != b.ID || calls[1].Status != 200 {
		t.Fatalf("calls %+v", calls)
	}
	var m map[string]any
	_ = json.Unmarshal(calls[0].Body, &m)
	msg := m["params"].(map[string]any)["message"].(map[string]any)
	if msg["role"] != "user" || msg["parts"].([]any)[0].(map[string]any)["kind"] != "text" {
		t.Errorf("canvas body %v", m)
	}
}

// hangingAgent is a push agent that never answers (until the test ends).
func hangingAgent(t *testing.T) *agent {
	t.Helper()
	release := make(chan struct{})
	a := newAgent(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	return a
}
