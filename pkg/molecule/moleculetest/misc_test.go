package moleculetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// docs/protocol.md §1 (OLD) discover (and §9 hierarchy).
func TestDiscover(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	c := s.CreateChild(b.ID, "child-of-B")
	ag := newAgent(t, echoReply)
	call(t, s, "POST", "/registry/register", bearerH(b.Token), `{"id":"`+b.ID+`","url":"`+ag.localhostURL("/")+`","agent_card":{}}`)
	registerPoll(t, s, a)
	call(t, s, "POST", "/registry/register", bearerH(c.Token), `{"id":"`+c.ID+`","delivery_mode":"poll","url":"remote://no-inbound","agent_card":{}}`)
	from := func(w moleculetest.Workspace) http.Header {
		return hdr("Authorization", "Bearer "+w.Token, "X-Workspace-ID", w.ID)
	}
	cases := []struct {
		name   string
		target string
		h      http.Header
		status int
		want   string
	}{
		{"no X-Workspace-ID", b.ID, bearerH(a.Token), 400, `{"error":"X-Workspace-ID header is required"}`},
		{"no bearer", b.ID, hdr("X-Workspace-ID", a.ID), 401, `{"error":"missing workspace auth token"}`},
		{"wrong bearer", b.ID, hdr("X-Workspace-ID", a.ID, "Authorization", "Bearer "+b.Token), 401, `{"error":"invalid workspace auth token"}`},
		{"root to root with http url", b.ID, from(a), 200, `{"id":"` + b.ID + `","name":"ext-B","url":"` + ag.localhostURL("/") + `"}`},
		{"root to other root's child", c.ID, from(a), 403, `{"error":"not authorized to discover this workspace"}`},
		{"parent to child remote url", c.ID, from(b), 503, `{"error":"workspace URL failed safety check"}`},
		{"no url", a.ID, from(b), 503, `{"error":"workspace not available","status":"online"}`},
		{"child to parent", b.ID, from(c), 200, ""},
		{"unknown target", "6f1c1e0a-8a55-4bd7-9f0a-3f2b8c1d2e3f", from(a), 404, `{"error":"workspace not found"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, call(t, s, "GET", "/registry/discover/"+tc.target, tc.h, ""), tc.status, tc.want)
		})
	}
	// The same hierarchy rule guards peer A2A.
	r := call(t, s, "POST", "/workspaces/"+c.ID+"/a2a", from(a), canvasMsg)
	expect(t, r, 403, `{"error":"access denied: workspaces cannot communicate per hierarchy rules"}`)
}

func TestPeers(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	c := s.CreateChild(a.ID, "child-C")
	d := s.CreateChild(c.ID, "grandchild-D")
	e := s.CreateChild(a.ID, "child-E")
	ids := func(r resp) []string {
		var out []string
		for _, p := range r.array(t) {
			out = append(out, p["id"].(string))
		}
		sort.Strings(out)
		return out
	}
	sorted := func(v ...string) []string { sort.Strings(v); return v }
	r := call(t, s, "GET", "/registry/"+a.ID+"/peers", bearerH(a.Token), "")
	if got := ids(r); mustJSON(got) != mustJSON(sorted(b.ID, c.ID, e.ID)) {
		t.Errorf("peers of A %v", got)
	}
	entry := r.array(t)[0]
	if mustJSON(keys(entry)) != `["active_tasks","agent_card","id","name","parent_id","role","status","tier","url"]` || entry["role"] != nil || entry["url"] != "" {
		t.Errorf("entry %v", entry)
	}
	if got := ids(call(t, s, "GET", "/registry/"+c.ID+"/peers", bearerH(c.Token), "")); mustJSON(got) != mustJSON(sorted(e.ID, d.ID, a.ID)) {
		t.Errorf("peers of C %v", got)
	}
	if r := call(t, s, "GET", "/registry/"+d.ID+"/peers", bearerH(d.Token), ""); string(r.body) == "null" || len(r.array(t)) != 1 {
		t.Errorf("peers of D %s", r.body)
	}
	s.Delete(b.ID)
	if got := ids(call(t, s, "GET", "/registry/"+a.ID+"/peers", bearerH(a.Token), "")); len(got) != 2 {
		t.Errorf("removed peer listed: %v", got)
	}
	lone := newServer(t)
	l := lone.CreateWorkspace("alone")
	if r := call(t, lone, "GET", "/registry/"+l.ID+"/peers", bearerH(l.Token), ""); string(r.body) != "[]" {
		t.Errorf("empty peers %s", r.body)
	}
	expect(t, call(t, s, "GET", "/registry/"+a.ID+"/peers", nil, ""), 401, `{"error":"missing workspace auth token"}`)
}

func TestTenantGuard(t *testing.T) {
	s := newServer(t, moleculetest.WithOrgID("org-1"))
	a := s.CreateWorkspace("ext-A")
	state := "/workspaces/" + a.ID + "/state"
	cases := []struct {
		name, method, path, body string
		h                        http.Header
		status                   int
	}{
		{"no header", "GET", state, "", bearerH(a.Token), 404},
		{"wrong org", "GET", state, "", hdr("Authorization", "Bearer "+a.Token, "X-Molecule-Org-Id", "org-2"), 404},
		{"org header", "GET", state, "", hdr("Authorization", "Bearer "+a.Token, "X-Molecule-Org-Id", "org-1"), 200},
		{"same origin", "GET", state, "", hdr("Authorization", "Bearer "+a.Token, "Origin", s.URL()), 200},
		{"other origin", "GET", state, "", hdr("Authorization", "Bearer "+a.Token, "Origin", "https://evil.example"), 404},
		{"peers need it", "GET", "/registry/" + a.ID + "/peers", "", bearerH(a.Token), 404},
		{"a2a needs it", "POST", "/workspaces/" + a.ID + "/a2a", canvasMsg, nil, 404},
		{"health exempt", "GET", "/health", "", nil, 200},
		{"metrics exempt", "GET", "/metrics", "", nil, 200},
		{"register exempt", "POST", "/registry/register", `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{}}`, bearerH(a.Token), 200},
		{"heartbeat exempt", "POST", "/registry/heartbeat", `{"workspace_id":"` + a.ID + `"}`, bearerH(a.Token), 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, tc.method, tc.path, tc.h, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d (%s)", r.status, tc.status, r.body)
			}
			if tc.status == 404 && len(r.body) != 0 {
				t.Errorf("guard 404 has a body: %q", r.body)
			}
		})
	}
	// The helpers send the org header themselves.
	if code, _, err := s.SendCanvas(context.Background(), a.ID, "hi"); err != nil || code != 200 {
		t.Errorf("SendCanvas through the guard: %d %v", code, err)
	}
}

// docs/protocol.md §4: a late-committed row is lost for a naive since_id poller.
func TestLateCommitLosesRowForNaivePoller(t *testing.T) {
	const lag = time.Second
	s := newServer(t, moleculetest.WithLateCommit(0.1, lag))
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"seed"}`)
	cursor := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)[0]["id"].(string)
	seen := map[string]bool{}
	poll := func() {
		rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=a2a_receive&limit=100&since_id="+cursor, bearerH(a.Token), "").array(t)
		for _, r := range rows {
			seen[r["request_body"].(map[string]any)["params"].(map[string]any)["message"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"].(string)] = true
			cursor = r["id"].(string)
		}
	}
	start := time.Now()
	for i := 1; i <= 12; i++ { // the 10th queued row is late
		if code, _, _ := s.SendCanvas(context.Background(), a.ID, "m"+strconv.Itoa(i)); code != 200 {
			t.Fatal(code)
		}
		poll()
	}
	if time.Since(start) > lag {
		t.Skip("machine too slow: the lag passed before the poller moved on")
	}
	if len(s.Rows(a.ID)) != 13 {
		t.Fatalf("Rows must include the pending row: %d", len(s.Rows(a.ID)))
	}
	waitFor(t, "late row visible", 5*time.Second, func() bool {
		return len(call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)) == 13
	})
	poll()
	for i := 1; i <= 12; i++ {
		want := i != 10
		if seen["m"+strconv.Itoa(i)] != want {
			t.Errorf("m%d seen=%v, want %v", i, seen["m"+strconv.Itoa(i)], want)
		}
	}
	// An overlap re-read (since_secs, DESC) finds the lost row.
	found := false
	for _, r := range call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=a2a_receive&since_secs=60", bearerH(a.Token), "").array(t) {
		if rb, ok := r["request_body"].(map[string]any); ok && mustJSON(rb) != "" && r["method"] == "message/send" &&
			rb["params"].(map[string]any)["message"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"] == "m10" {
			found = true
		}
	}
	if !found {
		t.Errorf("overlap re-read did not find m10")
	}
}

func TestAsyncRows(t *testing.T) {
	s := newServer(t, moleculetest.WithAsyncRows(30*time.Millisecond), moleculetest.WithSeed(7))
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	for i := 0; i < 10; i++ {
		if code, _, _ := s.SendCanvas(context.Background(), a.ID, "m"); code != 200 {
			t.Fatal(code)
		}
	}
	waitFor(t, "async rows", 5*time.Second, func() bool { return len(s.Rows(a.ID)) == 10 })
	rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)
	if len(rows) != 10 {
		t.Errorf("rows %d", len(rows))
	}
}

func TestPruneRows(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"old"}`)
	cur := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)[0]["id"].(string)
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/activity?since_id="+cur, bearerH(a.Token), ""), 200, `[]`)
	s.PruneRows(a.ID, time.Now().Add(time.Second))
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/activity?since_id="+cur, bearerH(a.Token), ""), 410, "")
	if len(s.Rows(a.ID)) != 0 {
		t.Errorf("rows not pruned")
	}
}

func TestFaults(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	state := "/workspaces/" + a.ID + "/state"
	s.InjectFault(moleculetest.Fault{Method: "GET", PathPrefix: "/workspaces/", Status: 503, Body: `{"error":"down"}`, Header: hdr("Retry-After", "3"), Count: 2})
	for i := 0; i < 2; i++ {
		r := call(t, s, "GET", state, bearerH(a.Token), "")
		expect(t, r, 503, `{"error":"down"}`)
		if r.header.Get("Retry-After") != "3" {
			t.Errorf("header %v", r.header)
		}
	}
	expect(t, call(t, s, "GET", state, bearerH(a.Token), ""), 200, "")

	s.InjectFault(moleculetest.Fault{PathPrefix: "/health", Latency: 80 * time.Millisecond, Count: 1})
	start := time.Now()
	expect(t, call(t, s, "GET", "/health", nil, ""), 200, `{"status":"ok"}`)
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("latency %v", d)
	}

	s.InjectFault(moleculetest.Fault{PathPrefix: "/health", Malformed: true})
	for i := 0; i < 2; i++ { // Count 0: until cleared
		r := call(t, s, "GET", "/health", nil, "")
		var v any
		if r.status != 200 || json.Unmarshal(r.body, &v) == nil {
			t.Errorf("malformed: %d %s", r.status, r.body)
		}
	}
	s.ClearFaults()
	expect(t, call(t, s, "GET", "/health", nil, ""), 200, `{"status":"ok"}`)

	s.InjectFault(moleculetest.Fault{Method: "POST", PathPrefix: "/registry/heartbeat", Drop: true, Count: 1})
	req, _ := http.NewRequest("POST", s.URL()+"/registry/heartbeat", nil)
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err == nil {
		res.Body.Close()
		t.Errorf("dropped request answered %d", res.StatusCode)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("drop error: %v", err)
	}
	expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`), 200, "")
}

func TestRequests(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"x"}`)
	call(t, s, "GET", "/workspaces/"+a.ID+"/activity?limit=5", bearerH(a.Token), "")
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("requests %d", len(reqs))
	}
	r0, r1 := reqs[0], reqs[1]
	if r0.Method != "POST" || r0.Path != "/workspaces/"+a.ID+"/notify" || string(r0.Body) != `{"message":"x"}` || r0.Status != 200 || r0.Header.Get("Authorization") != "Bearer "+a.Token {
		t.Errorf("r0 %+v", r0)
	}
	if r1.Query != "limit=5" || r1.Status != 200 || r1.At.Before(r0.At) {
		t.Errorf("r1 %+v", r1)
	}

	capped := newServer(t, moleculetest.WithRequestLogLimit(3))
	for i := 0; i < 5; i++ {
		call(t, capped, "GET", "/health?i="+strconv.Itoa(i), nil, "")
	}
	got := capped.Requests()
	if len(got) != 3 || got[0].Query != "i=2" || got[2].Query != "i=4" {
		t.Errorf("capped %+v", got)
	}
	off := newServer(t, moleculetest.WithoutRequestLog())
	call(t, off, "GET", "/health", nil, "")
	if len(off.Requests()) != 0 {
		t.Errorf("recorded with WithoutRequestLog")
	}
}

func TestUpdateCardAndTokens(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	expect(t, call(t, s, "POST", "/registry/update-card", bearerH(a.Token), `{"workspace_id":"`+a.ID+`","agent_card":{"name":"new"}}`), 200, `{"status":"updated"}`)
	expect(t, call(t, s, "POST", "/registry/update-card", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`), 400, `{"error":"invalid request body"}`)
	expect(t, call(t, s, "POST", "/registry/update-card", nil, `{"workspace_id":"`+a.ID+`","agent_card":{}}`), 401, `{"error":"missing workspace auth token"}`)
	if m := call(t, s, "GET", "/workspaces/"+a.ID, nil, "").json(t); mustJSON(m["agent_card"]) != `{"name":"new"}` {
		t.Errorf("card %v", m["agent_card"])
	}
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/tokens", bearerH(s.AdminToken()), "")
	tok, _ := r.json(t)["auth_token"].(string)
	if r.status != 201 || !tokenRE.MatchString(tok) {
		t.Fatalf("mint %d %s", r.status, r.body)
	}
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(tok), ""), 200, "")
}
