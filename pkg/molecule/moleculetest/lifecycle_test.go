package moleculetest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// sse is an open event stream.
type sse struct {
	frames chan string
	resp   *http.Response
	cancel context.CancelFunc
}

func openSSE(t *testing.T, s *moleculetest.Server, id, tok string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/workspaces/"+id+"/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	st := &sse{frames: make(chan string, 256), resp: res, cancel: cancel}
	go func() {
		defer close(st.frames)
		br := bufio.NewReader(res.Body)
		var cur strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\n" {
				st.frames <- cur.String()
				cur.Reset()
				continue
			}
			cur.WriteString(line)
		}
	}()
	t.Cleanup(func() { cancel(); res.Body.Close() })
	return st
}

type event struct {
	Type      string         `json:"type"`
	Timestamp int64          `json:"timestamp"`
	Data      map[string]any `json:"data"`
}

// next returns the next frame, failing after d.
func (st *sse) next(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case f, ok := <-st.frames:
		if !ok {
			t.Fatal("stream ended")
		}
		return f
	case <-time.After(d):
		t.Fatal("no frame")
	}
	return ""
}

func (st *sse) event(t *testing.T) event {
	t.Helper()
	f := st.next(t, 5*time.Second)
	if !strings.HasPrefix(f, "data: ") || strings.Count(f, "\n") != 1 {
		t.Fatalf("frame %q is not a single data line", f)
	}
	var e event
	if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(f, "data: "), "\n")), &e); err != nil {
		t.Fatalf("frame %q: %v", f, err)
	}
	if e.Timestamp < time.Now().Add(-time.Minute).UnixMilli() {
		t.Errorf("timestamp %d is not unix ms", e.Timestamp)
	}
	return e
}

// none asserts no frame arrives within d.
func (st *sse) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case f := <-st.frames:
		t.Errorf("unexpected frame %q", f)
	case <-time.After(d):
	}
}

// docs/protocol.md §4.
func TestSSE(t *testing.T) {
	s := newServer(t, moleculetest.WithRateLimit(100, time.Minute))
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, b)
	st := openSSE(t, s, a.ID, a.Token)
	h := st.resp.Header
	if st.resp.StatusCode != 200 || h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" || h.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("stream answer %d %v", st.resp.StatusCode, h)
	}
	if h.Get("X-RateLimit-Remaining") != "99" {
		t.Errorf("stream did not cost one token: %v", h.Get("X-RateLimit-Remaining"))
	}
	if f := st.next(t, 5*time.Second); f != ": ping\n" {
		t.Fatalf("first frame %q", f)
	}

	registerPoll(t, s, a)
	e := st.event(t)
	if e.Type != "WORKSPACE_ONLINE" || !jsonEqual(t, []byte(mustJSON(e.Data)), `{"agent_card":{"name":"ext-A"},"delivery_mode":"poll","url":""}`) {
		t.Errorf("register event %+v", e)
	}

	if code, _, err := s.SendCanvas(context.Background(), a.ID, "hi"); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	e = st.event(t)
	if e.Type != "ACTIVITY_LOGGED" || strings.Join(keys(e.Data), ",") != "activity_type,duration_ms,method,request_body,source_id,status,summary,target_id" {
		t.Fatalf("event %+v", e)
	}
	// 2026-08 announces the ingest row first (a2a_proxy.go:838-840).
	if e.Data["source_id"] != nil || e.Data["summary"] != "message/send → ext-A (ingest)" || e.Data["target_id"] != a.ID {
		t.Errorf("data %v", e.Data)
	}
	// Emitted after the row is visible.
	if rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t); len(rows) != 1 {
		t.Errorf("row not visible at event time")
	}

	s.SendPeer(context.Background(), b, a.ID, "from B")
	if e = st.event(t); e.Type != "ACTIVITY_LOGGED" || e.Data["source_id"] != b.ID {
		t.Errorf("peer event %+v", e)
	}

	call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"to user"}`)
	if e = st.event(t); e.Type != "AGENT_MESSAGE" || !jsonEqual(t, []byte(mustJSON(e.Data)), `{"message":"to user","name":"ext-A","workspace_id":"`+a.ID+`"}`) {
		t.Errorf("notify event %+v", e)
	}

	call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`","active_tasks":1,"uptime_seconds":5,"current_task":"work"}`)
	if e = st.event(t); e.Type != "WORKSPACE_HEARTBEAT" || !jsonEqual(t, []byte(mustJSON(e.Data)), `{"active_tasks":1,"uptime_seconds":5}`) {
		t.Errorf("heartbeat event %+v", e)
	}
	if e = st.event(t); e.Type != "TASK_UPDATED" || !jsonEqual(t, []byte(mustJSON(e.Data)), `{"active_tasks":1,"current_task":"work"}`) {
		t.Errorf("task event %+v", e)
	}

	// Sending from A to B produces nothing on A's stream (and notify gave no ACTIVITY_LOGGED).
	s.SendPeer(context.Background(), a, b.ID, "to B")
	st.none(t, 100*time.Millisecond)

	s.Delete(a.ID)
	if e = st.event(t); e.Type != "WORKSPACE_REMOVED" || !jsonEqual(t, []byte(mustJSON(e.Data)), `{"cascade_deleted":0}`) {
		t.Errorf("removed event %+v", e)
	}
	// The stream opened before the delete stays open.
	s.SendCanvas(context.Background(), a.ID, "after delete")
	if e = st.event(t); e.Type != "ACTIVITY_LOGGED" {
		t.Errorf("after delete %+v", e)
	}
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/events/stream", bearerH(a.Token), ""), 401, `{"error":"invalid workspace auth token"}`)
}

func TestCloseEndsStreams(t *testing.T) {
	s := moleculetest.NewServer()
	a := s.CreateWorkspace("ext-A")
	st := openSSE(t, s, a.ID, a.Token)
	st.next(t, 5*time.Second)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked with an open stream")
	}
	select {
	case _, ok := <-st.frames:
		for ok {
			_, ok = <-st.frames
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream not ended by Close")
	}
	s.Close() // idempotent
}

// docs/protocol.md §7 pause / resume.
func TestPauseResume(t *testing.T) {
	// Every call sends canvasMsg, one messageId, which 2026-08 folds into
	// one row (one_row_per_message_id_test.go): counted on 2026-05.
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	registerPoll(t, s, b)
	state := func(st string, paused bool) string {
		return `{"deleted":false,"paused":` + map[bool]string{true: "true", false: "false"}[paused] + `,"status":"` + st + `","workspace_id":"` + a.ID + `"}`
	}
	queued := `{"delivery_mode":"poll","method":"message/send","status":"queued"}`
	steps := []struct {
		name   string
		do     func() resp
		status int
		want   string
		after  string // expected status afterwards
	}{
		{"pause", func() resp { return call(t, s, "POST", "/workspaces/"+a.ID+"/pause", bearerH(a.Token), "") }, 200, `{"paused_count":1,"status":"paused"}`, "paused"},
		{"pause again", func() resp { return call(t, s, "POST", "/workspaces/"+a.ID+"/pause", bearerH(a.Token), "") }, 404, `{"error":"workspace not found or already paused"}`, "paused"},
		{"state paused", func() resp { return call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(a.Token), "") }, 200, state("paused", true), "paused"},
		{"canvas to paused", func() resp { return call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), canvasMsg) }, 200, queued, "paused"},
		{"peer to paused", func() resp {
			return call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), canvasMsg)
		}, 200, queued, "paused"},
		{"paused sends", func() resp {
			return call(t, s, "POST", "/workspaces/"+b.ID+"/a2a", hdr("Authorization", "Bearer "+a.Token, "X-Workspace-ID", a.ID), canvasMsg)
		}, 200, queued, "paused"},
		{"notify while paused", func() resp {
			return call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"x"}`)
		}, 200, `{"status":"sent"}`, "paused"},
		{"heartbeat keeps paused", func() resp {
			return call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`)
		}, 200, "", "paused"},
		{"register un-pauses", func() resp {
			return call(t, s, "POST", "/registry/register", bearerH(a.Token), `{"id":"`+a.ID+`","delivery_mode":"poll","agent_card":{}}`)
		}, 200, "", "online"},
		{"pause for resume", func() resp { return call(t, s, "POST", "/workspaces/"+a.ID+"/pause", bearerH(a.Token), "") }, 200, "", "paused"},
		{"resume (admin) ends failed", func() resp { return call(t, s, "POST", "/workspaces/"+a.ID+"/resume", bearerH(s.AdminToken()), "") }, 200, `{"resumed_count":1,"status":"provisioning"}`, "failed"},
		{"a2a to failed", func() resp { return call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), canvasMsg) }, 200, queued, "failed"},
		{"heartbeat keeps failed", func() resp {
			return call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`)
		}, 200, "", "failed"},
		{"register recovers", func() resp {
			return call(t, s, "POST", "/registry/register", bearerH(a.Token), `{"id":"`+a.ID+`","delivery_mode":"poll","agent_card":{}}`)
		}, 200, "", "online"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			expect(t, st.do(), st.status, st.want)
			if got := s.Status(a.ID).Status; got != st.after {
				t.Errorf("status %s, want %s", got, st.after)
			}
		})
	}
	if n := len(s.Rows(a.ID)); n != 4 { // canvas, peer, notify, a2a-to-failed
		t.Errorf("rows on A %d, want 4", n)
	}
}

// docs/protocol.md §7 after delete, as observed on 2026-05 (on 2026-08 a
// deleted workspace's token no longer authenticates an /a2a caller:
// TestA2ACallerAuthIsSourceBound).
func TestAfterDelete(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	registerPoll(t, s, b)
	secret := s.InboundSecret(a.ID)
	s.Delete(a.ID)
	invalid := `{"error":"invalid workspace auth token"}`
	queued := `{"delivery_mode":"poll","method":"message/send","status":"queued"}`
	var minted string
	steps := []struct {
		name   string
		method string
		path   string
		h      http.Header
		body   string
		status int
		want   string
	}{
		{"state TA", "GET", "/workspaces/" + a.ID + "/state", bearerH(a.Token), "", 401, invalid},
		{"state admin", "GET", "/workspaces/" + a.ID + "/state", bearerH(s.AdminToken()), "", 404, `{"deleted":true,"status":"removed","workspace_id":"` + a.ID + `"}`},
		{"activity TA", "GET", "/workspaces/" + a.ID + "/activity", bearerH(a.Token), "", 401, invalid},
		{"activity admin", "GET", "/workspaces/" + a.ID + "/activity", bearerH(s.AdminToken()), "", 200, `[]`},
		{"notify TA", "POST", "/workspaces/" + a.ID + "/notify", bearerH(a.Token), `{"message":"x"}`, 401, invalid},
		{"notify admin", "POST", "/workspaces/" + a.ID + "/notify", bearerH(s.AdminToken()), `{"message":"x"}`, 404, `{"error":"workspace not found"}`},
		{"peers TA", "GET", "/registry/" + a.ID + "/peers", bearerH(a.Token), "", 401, invalid},
		{"heartbeat TA", "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"` + a.ID + `","active_tasks":3}`, 200, `{"platform_inbound_secret":"` + secret + `","status":"ok"}`},
		{"heartbeat no auth", "POST", "/registry/heartbeat", nil, `{"workspace_id":"` + a.ID + `"}`, 200, `{"platform_inbound_secret":"` + secret + `","status":"ok"}`},
		{"canvas to deleted", "POST", "/workspaces/" + a.ID + "/a2a", nil, canvasMsg, 200, queued},
		{"B to deleted", "POST", "/workspaces/" + a.ID + "/a2a", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), canvasMsg, 200, queued},
		{"deleted A to B with XWID", "POST", "/workspaces/" + b.ID + "/a2a", hdr("Authorization", "Bearer "+a.Token, "X-Workspace-ID", a.ID), canvasMsg, 401, `{"error":"invalid caller auth token"}`},
		{"deleted A to B without XWID", "POST", "/workspaces/" + b.ID + "/a2a", bearerH(a.Token), canvasMsg, 200, queued},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			expect(t, call(t, s, st.method, st.path, st.h, st.body), st.status, st.want)
		})
	}
	if st := s.Status(a.ID); st.Heartbeats != 0 || st.Status != "removed" {
		t.Errorf("removed row updated: %+v", st)
	}
	if n := len(s.Rows(a.ID)); n != 2 {
		t.Errorf("rows on removed A %d, want 2", n)
	}
	var row map[string]any
	rowsB := s.Rows(b.ID)
	if err := json.Unmarshal(rowsB[len(rowsB)-1], &row); err != nil || row["source_id"] != nil {
		t.Errorf("row on B from deleted A without XWID: source_id %v", row["source_id"])
	}

	r := call(t, s, "GET", "/workspaces/"+a.ID, nil, "")
	m := r.json(t)
	if r.status != 410 || m["error"] != "workspace removed" || m["hint"] != "Regenerate workspace + token from the canvas → Tokens tab" || m["id"] != a.ID {
		t.Errorf("GET removed: %d %s", r.status, r.body)
	}
	if _, err := time.Parse(time.RFC3339Nano, m["removed_at"].(string)); err != nil {
		t.Errorf("removed_at: %v", err)
	}
	if m := call(t, s, "GET", "/workspaces/"+a.ID+"?include_removed=true", nil, "").json(t); m["status"] != "removed" {
		t.Errorf("include_removed: %v", m)
	}

	// Register with the dead token mints a token that never validates.
	r = call(t, s, "POST", "/registry/register", bearerH(a.Token), `{"id":"`+a.ID+`","delivery_mode":"poll","agent_card":{}}`)
	m = r.json(t)
	minted, _ = m["auth_token"].(string)
	if r.status != 200 || !tokenRE.MatchString(minted) || m["delivery_mode"] != "poll" || m["status"] != "registered" {
		t.Fatalf("register removed: %d %s", r.status, r.body)
	}
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(minted), ""), 401, invalid)
	expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(minted), `{"workspace_id":"`+a.ID+`"}`), 401, invalid)
	expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`), 401, invalid)
	expect(t, call(t, s, "POST", "/registry/register", nil, `{"id":"`+a.ID+`","delivery_mode":"poll","agent_card":{}}`), 401, `{"error":"missing workspace auth token"}`)
	if st := s.Status(a.ID).Status; st != "removed" {
		t.Errorf("register changed a removed row: %s", st)
	}
}

func TestAdminDeleteEndpoint(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	expect(t, call(t, s, "DELETE", "/workspaces/"+a.ID, nil, ""), 401, `{"error":"admin auth required"}`)
	expect(t, call(t, s, "DELETE", "/workspaces/"+a.ID, bearerH(a.Token), ""), 401, `{"error":"invalid admin auth token"}`)
	r := call(t, s, "DELETE", "/workspaces/"+a.ID, hdr("Authorization", "Bearer "+s.AdminToken(), "X-Confirm-Name", a.Name), "")
	if r.status != 500 || r.json(t)["removed_count"] != 1.0 || s.Status(a.ID).Status != "removed" {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
}

func TestGetWorkspace(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	expect(t, call(t, s, "GET", "/workspaces/not-a-uuid", nil, ""), 400, `{"error":"invalid workspace ID"}`)
	expect(t, call(t, s, "GET", "/workspaces/6f1c1e0a-8a55-4bd7-9f0a-3f2b8c1d2e3f", nil, ""), 404, `{"error":"workspace not found"}`)
	m := call(t, s, "GET", "/workspaces/"+a.ID, nil, "").json(t)
	want := "active_tasks,agent_card,collapsed,id,last_error_rate,last_outbound_at,max_concurrent_tasks,name,parent_id,role,runtime,status,tier,uptime_seconds,url,x,y"
	if strings.Join(keys(m), ",") != want || m["status"] != "awaiting_agent" || m["runtime"] != "external" {
		t.Errorf("workspace %v", m)
	}
}

func TestSecrets(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	p := "/workspaces/" + a.ID + "/secrets/values"
	expect(t, call(t, s, "GET", p, bearerH(a.Token), ""), 200, `{}`)
	s.SetSecret(a.ID, "MY_API_KEY", "sk-local-123")
	s.SetGlobalSecret("GLOBAL_FOO", "bar")
	s.SetGlobalSecret("MY_API_KEY", "global-loses")
	expect(t, call(t, s, "GET", p, bearerH(a.Token), ""), 200, `{"GLOBAL_FOO":"bar","MY_API_KEY":"sk-local-123"}`)
	expect(t, call(t, s, "GET", p, nil, ""), 401, `{"error":"missing workspace auth token"}`)
	expect(t, call(t, s, "GET", p, bearerH(s.AdminToken()), ""), 401, `{"error":"invalid workspace auth token"}`)
}
