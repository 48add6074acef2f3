package moleculetest_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

func TestCreateWorkspace(t *testing.T) {
	for _, tc := range []struct {
		gen    moleculetest.Generation
		status string
	}{{moleculetest.Gen2026_05, "awaiting_agent"}, {moleculetest.Gen2026_04, "provisioning"}} {
		s := newServer(t, moleculetest.WithGeneration(tc.gen))
		w := s.CreateWorkspace("ext-A")
		if !tokenRE.MatchString(w.Token) {
			t.Errorf("token %q is not 43-char base64url", w.Token)
		}
		if b, err := base64.RawURLEncoding.DecodeString(w.Token); err != nil || len(b) != 32 {
			t.Errorf("token decodes to %d bytes, %v", len(b), err)
		}
		st := s.Status(w.ID)
		if st.Status != tc.status || st.DeliveryMode != "push" {
			t.Errorf("gen %d: status %+v, want %s/push", tc.gen, st, tc.status)
		}
		r := call(t, s, "GET", "/workspaces/"+w.ID+"/state", bearerH(w.Token), "")
		expect(t, r, 200, `{"deleted":false,"paused":false,"status":"`+tc.status+`","workspace_id":"`+w.ID+`"}`)
	}
}

// docs/protocol.md §3.
func TestRegisterNew(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	secret := s.InboundSecret(a.ID)
	ok := `{"delivery_mode":"poll","platform_inbound_secret":"` + secret + `","status":"registered"}`
	cases := []struct {
		name   string
		h      http.Header
		body   string
		status int
		want   string
		url    string
	}{
		{"no mode no url (stored push)", bearerH(a.Token), `{"id":"` + a.ID + `","agent_card":{"name":"ext-A"}}`, 400, `{"error":"url is required for push-mode workspaces"}`, ""},
		{"no bearer", nil, `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{}}`, 401, `{"error":"missing workspace auth token"}`, ""},
		{"wrong bearer", bearerH(otherToken(a.Token)), `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{}}`, 401, `{"error":"invalid workspace auth token"}`, ""},
		{"bad mode", bearerH(a.Token), `{"id":"` + a.ID + `","delivery_mode":"pull","agent_card":{}}`, 400, `{"error":"delivery_mode must be 'push' or 'poll'"}`, ""},
		{"poll no url", bearerH(a.Token), `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{"name":"ext-A","description":"poll agent A"}}`, 200, ok, ""},
		{"same again", bearerH(a.Token), `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{"name":"ext-A","description":"poll agent A"}}`, 200, ok, ""},
		{"poll with remote url stored", bearerH(a.Token), `{"id":"` + a.ID + `","delivery_mode":"poll","url":"remote://no-inbound","agent_card":{}}`, 200, ok, "remote://no-inbound"},
		{"poll without url clears it", bearerH(a.Token), `{"id":"` + a.ID + `","delivery_mode":"poll","agent_card":{}}`, 200, ok, ""},
		{"not json", bearerH(a.Token), `nope`, 400, `{"error":"invalid request body"}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "POST", "/registry/register", tc.h, tc.body)
			expect(t, r, tc.status, tc.want)
			if tc.status == 200 {
				if st := s.Status(a.ID); st.URL != tc.url || st.DeliveryMode != "poll" || st.Status != "online" {
					t.Errorf("status after register %+v", st)
				}
			}
		})
	}
	if n := s.Status(a.ID).Registrations; n != 4 {
		t.Errorf("registrations %d, want 4", n)
	}
}

func TestRegisterForcesOnlineAndUnpauses(t *testing.T) {
	for _, from := range []string{"paused", "failed", "awaiting_agent", "offline"} {
		s := newServer(t)
		a := s.CreateWorkspace("ext-A")
		s.SetStatus(a.ID, from)
		registerPoll(t, s, a)
		r := call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(a.Token), "")
		expect(t, r, 200, `{"deleted":false,"paused":false,"status":"online","workspace_id":"`+a.ID+`"}`)
	}
}

func TestRegisterUnknownIDMintsToken(t *testing.T) {
	s := newServer(t)
	id := "0b6f3c1e-2d4a-4b8e-9f10-1a2b3c4d5e6f"
	r := call(t, s, "POST", "/registry/register", nil, `{"id":"`+id+`","delivery_mode":"poll","agent_card":{}}`)
	m := r.json(t)
	if r.status != 200 || !tokenRE.MatchString(m["auth_token"].(string)) {
		t.Fatalf("first register: %d %s", r.status, r.body)
	}
	r = call(t, s, "POST", "/registry/register", nil, `{"id":"`+id+`","delivery_mode":"poll","agent_card":{}}`)
	expect(t, r, 401, `{"error":"missing workspace auth token"}`)
	r = call(t, s, "POST", "/registry/register", bearerH(m["auth_token"].(string)), `{"id":"`+id+`","delivery_mode":"poll","agent_card":{}}`)
	if r.status != 200 || strings.Contains(string(r.body), "auth_token") {
		t.Errorf("re-register: %d %s", r.status, r.body)
	}
}

const canvasMsg = `{"jsonrpc":"2.0","id":"req-1","method":"message/send","params":{"message":{"role":"user","messageId":"m-1","parts":[{"kind":"text","text":"hello from canvas 1"}]},"metadata":{"history":[]}}}`

// docs/protocol.md §6: caller identity.
// TestCanvasCallerIdentity is the caller identity of 2026-05; 2026-08's
// is TestA2ACallerAuthIsSourceBound.
func TestCanvasCallerIdentity(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	registerPoll(t, s, b)
	queued := `{"delivery_mode":"poll","method":"message/send","status":"queued"}`
	cases := []struct {
		name   string
		h      http.Header
		status int
		want   string
		source any // nil = null; "" = no row
	}{
		{"none", nil, 200, queued, nil},
		{"admin bearer", bearerH(s.AdminToken()), 200, queued, nil},
		{"garbage bearer", bearerH("garbage"), 200, queued, nil},
		{"own token no XWID", bearerH(a.Token), 200, queued, a.ID},
		{"TB with XWID=A (self)", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", a.ID), 200, queued, a.ID},
		{"self no bearer", hdr("X-Workspace-ID", a.ID), 200, queued, a.ID},
		{"channel caller", hdr("X-Workspace-ID", "channel:slack"), 403, `{"error":"invalid caller ID"}`, ""},
		{"system caller", hdr("X-Workspace-ID", "system:cron"), 403, `{"error":"invalid caller ID"}`, ""},
		{"peer B with TB", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), 200, queued, b.ID},
		{"peer B with TA", hdr("Authorization", "Bearer "+a.Token, "X-Workspace-ID", b.ID), 401, `{"error":"invalid caller auth token"}`, ""},
		{"peer B no bearer", hdr("X-Workspace-ID", b.ID), 401, `{"error":"missing caller auth token"}`, ""},
		{"X-Source-Workspace-Id with TB", hdr("Authorization", "Bearer "+b.Token, "X-Source-Workspace-Id", b.ID), 200, queued, b.ID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			callerRow(t, s, a.ID, tc.h, canvasMsg, tc.status, tc.want, tc.source)
		})
	}
	if rows := s.Rows(b.ID); len(rows) != 0 {
		t.Errorf("caller B's feed got %d rows, want 0", len(rows))
	}
}

var rowKeysQueued = []string{"activity_type", "created_at", "duration_ms", "error_detail", "id", "method", "request_body", "source_id", "status", "summary", "target_id", "workspace_id"}

// TestQueuedRowShape is the 2026-05 row; 2026-08 adds seq and keeps the
// ingest row's summary (feed_2026_08_test.go).
func TestQueuedRowShape(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	body := `{"jsonrpc":"2.0","id":"1f6b","method":"message/send","params":{"message":{"role":"user","messageId":"d30a","parts":[{"kind":"text","text":"hello <from> canvas 1"}],"metadata":{"in_reply_to":"abc"}},"metadata":{"history":[]}}}`
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), body)
	expect(t, r, 200, `{"delivery_mode":"poll","method":"message/send","status":"queued"}`)
	act := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "")
	rows := act.array(t)
	if len(rows) != 1 {
		t.Fatalf("rows %d", len(rows))
	}
	row := rows[0]
	if got := keys(row); strings.Join(got, ",") != strings.Join(rowKeysQueued, ",") {
		t.Errorf("keys %v, want %v", got, rowKeysQueued)
	}
	want := map[string]any{"activity_type": "a2a_receive", "duration_ms": nil, "error_detail": nil, "method": "message/send",
		"source_id": nil, "status": "ok", "summary": "message/send → ext-A (queued for poll)", "target_id": a.ID, "workspace_id": a.ID}
	for k, v := range want {
		if row[k] != v {
			t.Errorf("%s = %v, want %v", k, row[k], v)
		}
	}
	if !jsonEqual(t, []byte(mustJSON(row["request_body"])), body) {
		t.Errorf("request_body %v, want %s", row["request_body"], body)
	}
	ts := row["created_at"].(string)
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasSuffix(ts, "Z") {
		t.Errorf("created_at %q: %v", ts, err)
	}
	// The NEW platform returns request_body in jsonb key order, raw as stored.
	if !strings.Contains(string(act.body), `"request_body":{"id":"1f6b","method":"message/send","params":{"message":{"role":"user","parts":`) {
		t.Errorf("request_body not in jsonb order: %s", act.body)
	}
}

// docs/protocol.md §6 normalisation.
func TestA2ANormalisation(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	cases := []struct {
		name, body string
		status     int
		method     string
		check      func(t *testing.T, rb map[string]any)
	}{
		{"no jsonrpc rewrapped, extra keys dropped", `{"method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"x"}]}},"extra":1}`, 200, "message/send",
			func(t *testing.T, rb map[string]any) {
				if rb["jsonrpc"] != "2.0" || rb["extra"] != nil || rb["id"] == nil {
					t.Errorf("not rewrapped: %v", rb)
				}
				if id, _ := rb["params"].(map[string]any)["message"].(map[string]any)["messageId"].(string); id == "" {
					t.Errorf("messageId not generated")
				}
			}},
		{"parts only loses text", `{"parts":[{"kind":"text","text":"lost"}]}`, 200, "",
			func(t *testing.T, rb map[string]any) {
				if len(rb) != 4 || rb["method"] != nil || rb["params"] != nil || rb["jsonrpc"] != "2.0" {
					t.Errorf("request_body %v", rb)
				}
			}},
		{"metadata kept", `{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"message":{"role":"agent","messageId":"m","parts":[],"metadata":{"in_reply_to":"abc"}}}}`, 200, "message/send",
			func(t *testing.T, rb map[string]any) {
				md := rb["params"].(map[string]any)["message"].(map[string]any)["metadata"].(map[string]any)
				if md["in_reply_to"] != "abc" {
					t.Errorf("metadata %v", md)
				}
			}},
		{"tasks/get queued", `{"jsonrpc":"2.0","id":"x","method":"tasks/get","params":{"id":"t"}}`, 200, "tasks/get", nil},
		{"not json", `not json`, 400, "", nil},
		{"array", `[1,2]`, 400, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), tc.body)
			if tc.status == 400 {
				expect(t, r, 400, `{"error":"invalid JSON"}`)
				return
			}
			expect(t, r, 200, `{"delivery_mode":"poll","method":"`+tc.method+`","status":"queued"}`)
			rows := s.Rows(a.ID)
			var row map[string]any
			if err := jsonUnmarshal(rows[len(rows)-1], &row); err != nil {
				t.Fatal(err)
			}
			if row["method"] != tc.method {
				t.Errorf("row method %v", row["method"])
			}
			if tc.check != nil {
				tc.check(t, row["request_body"].(map[string]any))
			}
		})
	}
}

// docs/protocol.md §4.
func TestActivityQueryNew(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	registerPoll(t, s, b)
	ctx := context.Background()
	for i := 0; i < 105; i++ {
		if code, body, err := s.SendCanvas(ctx, a.ID, "m"+strconv.Itoa(i)); err != nil || code != 200 {
			t.Fatalf("send: %d %s %v", code, body, err)
		}
	}
	for i := 0; i < 3; i++ {
		if code, _, err := s.SendPeer(ctx, b, a.ID, "peer"); err != nil || code != 200 {
			t.Fatalf("peer send %d %v", code, err)
		}
	}
	call(t, s, "POST", "/workspaces/"+b.ID+"/notify", bearerH(b.Token), `{"message":"on B"}`)
	all := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?limit=500", bearerH(a.Token), "").array(t)
	if len(all) != 108 {
		t.Fatalf("all rows %d", len(all))
	}
	newest, oldest := all[0]["id"].(string), all[len(all)-1]["id"].(string)
	x := all[10]["id"].(string) // 10 rows are newer
	bRow := call(t, s, "GET", "/workspaces/"+b.ID+"/activity", bearerH(b.Token), "").array(t)[0]["id"].(string)
	gone := `{"error":"since_id cursor not found (row may have been pruned or belongs to a different workspace); omit since_id to reset"}`
	p := "/workspaces/" + a.ID + "/activity?"
	auth := bearerH(a.Token)
	desc := func(t *testing.T, rows []map[string]any) {
		for i := 1; i < len(rows); i++ {
			if rows[i-1]["created_at"].(string) < rows[i]["created_at"].(string) && len(rows[i-1]["created_at"].(string)) == len(rows[i]["created_at"].(string)) {
				t.Errorf("not DESC at %d", i)
			}
		}
	}
	cases := []struct {
		name   string
		q      string
		h      http.Header
		status int
		body   string
		n      int
		check  func(t *testing.T, rows []map[string]any)
	}{
		{"none: 100 DESC", "", auth, 200, "", 100, func(t *testing.T, rows []map[string]any) {
			if rows[0]["id"] != newest {
				t.Errorf("first row is not the newest")
			}
			desc(t, rows)
		}},
		{"limit=1000 capped", "limit=1000", auth, 200, "", 108, nil},
		{"limit=0", "limit=0", auth, 200, "", 100, nil},
		{"limit=abc", "limit=abc", auth, 200, "", 100, nil},
		{"since_id ASC strictly after", "type=a2a_receive&since_id=" + x, auth, 200, "", 10, func(t *testing.T, rows []map[string]any) {
			for _, r := range rows {
				if r["id"] == x {
					t.Errorf("cursor row returned")
				}
			}
			if rows[len(rows)-1]["id"] != newest || rows[0]["id"] != all[9]["id"] {
				t.Errorf("not ASC after cursor")
			}
		}},
		{"zero uuid", "type=a2a_receive&since_id=00000000-0000-0000-0000-000000000000&limit=1", auth, 410, gone, 0, nil},
		{"zero uuid alone", "since_id=00000000-0000-0000-0000-000000000000", auth, 410, gone, 0, nil},
		{"random uuid", "since_id=6f1c1e0a-8a55-4bd7-9f0a-3f2b8c1d2e3f", auth, 410, gone, 0, nil},
		{"row of B", "since_id=" + bRow, auth, 410, gone, 0, nil},
		{"not a uuid", "since_id=not-a-uuid", auth, 500, `{"error":"cursor lookup failed"}`, 0, nil},
		{"empty since_id", "since_id=", auth, 200, "", 100, desc},
		{"since_secs DESC", "since_secs=5", auth, 200, "", 100, desc},
		{"since_secs=0", "since_secs=0", auth, 400, `{"error":"since_secs must be a positive integer"}`, 0, nil},
		{"since_secs=-1", "since_secs=-1", auth, 400, `{"error":"since_secs must be a positive integer"}`, 0, nil},
		{"since_secs=abc", "since_secs=abc", auth, 400, `{"error":"since_secs must be a positive integer"}`, 0, nil},
		{"since_secs huge", "since_secs=99999999999", auth, 200, "", 100, nil},
		{"since_secs AND since_id", "since_secs=3600&since_id=" + oldest, auth, 200, "", 100, func(t *testing.T, rows []map[string]any) {
			if rows[0]["id"] != all[106]["id"] {
				t.Errorf("not ASC")
			}
		}},
		{"source=canvas", "source=canvas&limit=500", auth, 200, "", 105, nil},
		{"source=agent", "source=agent", auth, 200, "", 3, nil},
		{"source=user", "source=user", auth, 400, `{"error":"source must be 'canvas' or 'agent'"}`, 0, nil},
		{"peer_id=B", "peer_id=" + b.ID, auth, 200, "", 3, nil},
		{"peer_id bad", "peer_id=bad", auth, 400, `{"error":"peer_id must be a UUID"}`, 0, nil},
		{"before_ts bad", "before_ts=bad", auth, 400, `{"error":"before_ts must be an RFC3339 timestamp (e.g. 2026-05-01T00:00:00Z)"}`, 0, nil},
		{"before_ts oldest+", "before_ts=" + all[106]["created_at"].(string), auth, 200, "", 1, nil},
		// What it adds (2026-08), and that 2026-05 ignores it: peer_info_test.go.
		{"include=peer_info", "include=peer_info&limit=1", auth, 200, "", 1, nil},
		{"no bearer", "", nil, 401, `{"error":"missing workspace auth token"}`, 0, nil},
		{"B's token", "", bearerH(b.Token), 401, `{"error":"invalid workspace auth token"}`, 0, nil},
		{"admin", "limit=5", bearerH(s.AdminToken()), 200, "", 5, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "GET", p+tc.q, tc.h, "")
			expect(t, r, tc.status, tc.body)
			if tc.status != 200 {
				return
			}
			rows := r.array(t)
			if len(rows) != tc.n {
				t.Errorf("rows %d, want %d", len(rows), tc.n)
			}
			if tc.check != nil && len(rows) > 0 {
				tc.check(t, rows)
			}
		})
	}
}

func TestSinceIDPagesOneByOne(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"seed"}`)
	seed := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)[0]["id"].(string)
	for i := 0; i < 5; i++ {
		s.SendCanvas(context.Background(), a.ID, "page "+strconv.Itoa(i))
	}
	cur := seed
	for i := 0; i < 5; i++ {
		rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=a2a_receive&limit=1&since_id="+cur, bearerH(a.Token), "").array(t)
		if len(rows) != 1 {
			t.Fatalf("page %d: %d rows", i, len(rows))
		}
		text := rows[0]["request_body"].(map[string]any)["params"].(map[string]any)["message"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"]
		if text != "page "+strconv.Itoa(i) {
			t.Errorf("page %d got %v", i, text)
		}
		cur = rows[0]["id"].(string)
	}
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=a2a_receive&limit=1&since_id="+cur, bearerH(a.Token), ""), 200, `[]`)
}

// docs/protocol.md §6.
func TestNotify(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	cases := []struct {
		name   string
		h      http.Header
		body   string
		status int
		want   string
		resp   string // expected response_body of the new row
	}{
		{"message", bearerH(a.Token), `{"message":"Hello user, reply from A"}`, 200, `{"status":"sent"}`, `{"result":"Hello user, reply from A"}`},
		{"empty", bearerH(a.Token), `{"message":""}`, 400, `{"error":"message is required"}`, ""},
		{"missing", bearerH(a.Token), `{}`, 400, `{"error":"message is required"}`, ""},
		{"no bearer", nil, `{"message":"x"}`, 401, `{"error":"missing workspace auth token"}`, ""},
		{"TB", bearerH(b.Token), `{"message":"x"}`, 401, `{"error":"invalid workspace auth token"}`, ""},
		{"admin", bearerH(s.AdminToken()), `{"message":"from admin"}`, 200, `{"status":"sent"}`, `{"result":"from admin"}`},
		{"bad attachment", bearerH(a.Token), `{"message":"x","attachments":[{"uri":"","name":""}]}`, 400, `{"error":"attachment[0]: uri and name are required"}`, ""},
		{"second attachment bad", bearerH(a.Token), `{"message":"x","attachments":[{"uri":"u","name":"n"},{"uri":"u"}]}`, 400, `{"error":"attachment[1]: uri and name are required"}`, ""},
		{"extra key ignored", bearerH(a.Token), `{"message":"typed","type":"text"}`, 200, `{"status":"sent"}`, `{"result":"typed"}`},
		{"attachments", bearerH(a.Token), `{"message":"file","attachments":[{"uri":"workspace:/f.txt","name":"f.txt","mimeType":"text/plain","size":3}]}`, 200, `{"status":"sent"}`,
			`{"result":"file","parts":[{"kind":"file","file":{"uri":"workspace:/f.txt","name":"f.txt","mimeType":"text/plain","size":3}}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.Rows(a.ID))
			r := call(t, s, "POST", "/workspaces/"+a.ID+"/notify", tc.h, tc.body)
			expect(t, r, tc.status, tc.want)
			rows := s.Rows(a.ID)
			if tc.resp == "" {
				if len(rows) != before {
					t.Errorf("row written for a refused notify")
				}
				return
			}
			// Written synchronously: visible to the very next GET.
			got := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?limit=1", bearerH(a.Token), "").array(t)[0]
			if strings.Join(keys(got), ",") != "activity_type,created_at,duration_ms,error_detail,id,method,response_body,seq,source_id,status,summary,target_id,workspace_id" {
				t.Errorf("keys %v", keys(got))
			}
			msg := got["response_body"].(map[string]any)["result"].(string)
			for k, v := range map[string]any{"activity_type": "a2a_receive", "method": "notify", "source_id": nil, "target_id": nil,
				"duration_ms": nil, "error_detail": nil, "status": "ok", "summary": "Agent message: " + msg} {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			if !jsonEqual(t, []byte(mustJSON(got["response_body"])), tc.resp) {
				t.Errorf("response_body %v, want %s", got["response_body"], tc.resp)
			}
		})
	}
	if n := len(s.Notifications(a.ID)); n != 4 {
		t.Errorf("notifications %d, want 4", n)
	}
	// source=canvas sees notify rows too.
	rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=a2a_receive&source=canvas", bearerH(a.Token), "").array(t)
	if len(rows) != 4 {
		t.Errorf("canvas rows %d", len(rows))
	}
}

func TestNotifySummaryFirst80Bytes(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	long := strings.Repeat("abcdefghij", 12)
	call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"`+long+`"}`)
	row := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)[0]
	if row["summary"] != "Agent message: "+long[:80] {
		t.Errorf("summary %q", row["summary"])
	}
}

// docs/protocol.md §7.
func TestHeartbeat(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	secret := s.InboundSecret(a.ID)
	full := `{"workspace_id":"` + a.ID + `","error_rate":0.0,"sample_error":"","active_tasks":1,"uptime_seconds":42,"current_task":"t","monthly_spend":0,` +
		`"runtime_metadata":{"capabilities":{"heartbeat":true,"scheduler":false,"session":false,"status_mgmt":false,"retry":false,"activity_decoration":false,"channel_dispatch":false},"idle_timeout_seconds":120}}`
	// generation: registry.go:1677 (Gen2026_08, the default).
	ok := `{"generation":0,"platform_inbound_secret":"` + secret + `","status":"ok"}`
	cases := []struct {
		name, body string
		h          http.Header
		status     int
		want       string
		after      func(t *testing.T)
	}{
		{"full", full, bearerH(a.Token), 200, ok, func(t *testing.T) {
			m := call(t, s, "GET", "/workspaces/"+a.ID, nil, "").json(t)
			if m["active_tasks"] != 1.0 || m["uptime_seconds"] != 42.0 {
				t.Errorf("counters %v %v", m["active_tasks"], m["uptime_seconds"])
			}
		}},
		{"minimal overwrites counters", `{"workspace_id":"` + a.ID + `"}`, bearerH(a.Token), 200, ok, func(t *testing.T) {
			m := call(t, s, "GET", "/workspaces/"+a.ID, nil, "").json(t)
			if m["active_tasks"] != 0.0 || m["uptime_seconds"] != 0.0 {
				t.Errorf("counters %v %v", m["active_tasks"], m["uptime_seconds"])
			}
		}},
		{"no bearer", full, nil, 401, `{"error":"missing workspace auth token"}`, nil},
		{"TB", full, bearerH(b.Token), 401, `{"error":"invalid workspace auth token"}`, nil},
		{"admin", full, bearerH(s.AdminToken()), 401, `{"error":"invalid workspace auth token"}`, nil},
		{"no workspace_id", `{"active_tasks":1}`, bearerH(a.Token), 400, `{"error":"invalid request body"}`, nil},
		{"capability not bool", `{"workspace_id":"` + a.ID + `","runtime_metadata":{"capabilities":{"heartbeat":"yes"}}}`, bearerH(a.Token), 400, `{"error":"invalid request body"}`, nil},
		{"agent_card accepted", `{"workspace_id":"` + a.ID + `","agent_card":{"name":"x"}}`, bearerH(a.Token), 200, ok, nil},
		{"wedged -> degraded", `{"workspace_id":"` + a.ID + `","runtime_state":"wedged"}`, bearerH(a.Token), 200, ok, func(t *testing.T) {
			if st := s.Status(a.ID).Status; st != "degraded" {
				t.Errorf("status %s", st)
			}
		}},
		{"recovers to online", full, bearerH(a.Token), 200, ok, func(t *testing.T) {
			if st := s.Status(a.ID).Status; st != "online" {
				t.Errorf("status %s", st)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, call(t, s, "POST", "/registry/heartbeat", tc.h, tc.body), tc.status, tc.want)
			if tc.after != nil {
				tc.after(t)
			}
		})
	}
	st := s.Status(a.ID)
	if st.Heartbeats != 5 || !jsonEqual(t, st.LastHeartbeat, full) {
		t.Errorf("heartbeats %d last %s", st.Heartbeats, st.LastHeartbeat)
	}
}

func TestHeartbeatTransitions(t *testing.T) {
	cases := []struct{ from, to string }{
		{"awaiting_agent", "online"}, {"offline", "online"}, {"provisioning", "online"},
		{"failed", "failed"}, {"paused", "paused"},
	}
	for _, tc := range cases {
		s := newServer(t)
		a := s.CreateWorkspace("ext-A")
		s.SetStatus(a.ID, tc.from)
		expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`), 200, "")
		if st := s.Status(a.ID).Status; st != tc.to {
			t.Errorf("%s -> %s, want %s", tc.from, st, tc.to)
		}
	}
}

func TestStateAuth(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(a.Token), ""), 200, `{"deleted":false,"paused":false,"status":"online","workspace_id":"`+a.ID+`"}`)
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(s.AdminToken()), ""), 401, `{"error":"invalid workspace auth token"}`)
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/state", nil, ""), 401, `{"error":"missing workspace auth token"}`)
}

// docs/protocol.md §2.
func TestRateLimit(t *testing.T) {
	s := newServer(t, moleculetest.WithRateLimit(5, time.Minute))
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	p := "/workspaces/" + a.ID + "/activity"
	for i := 0; i < 5; i++ {
		r := call(t, s, "GET", p, bearerH(a.Token), "")
		if r.status != 200 || r.header.Get("X-RateLimit-Limit") != "5" || r.header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) || r.header.Get("X-RateLimit-Reset") == "" {
			t.Fatalf("request %d: %d %v", i, r.status, r.header)
		}
	}
	r := call(t, s, "GET", p, bearerH(a.Token), "")
	ra := r.header.Get("Retry-After")
	n, _ := strconv.Atoi(ra)
	if r.status != 429 || n < 1 || n > 60 || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("429 expected: %d %v", r.status, r.header)
	}
	expect(t, r, 429, `{"error":"rate limit exceeded","retry_after":`+ra+`}`)
	// Heartbeat with the same token shares the bucket; it runs before auth.
	expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`"}`), 429, "")
	expect(t, call(t, s, "GET", "/workspaces/"+a.ID+"/state", bearerH(a.Token+"x"), ""), 401, "")
	// Another token, the IP bucket, and the same token with an org header are fresh.
	expect(t, call(t, s, "POST", "/registry/heartbeat", bearerH(b.Token), `{"workspace_id":"`+b.ID+`"}`), 200, "")
	expect(t, call(t, s, "GET", "/health", nil, ""), 200, `{"status":"ok"}`)
	h := bearerH(a.Token)
	h.Set("X-Molecule-Org-Id", "any-org")
	expect(t, call(t, s, "GET", p, h, ""), 200, "")
}

func TestRateLimitDisabled(t *testing.T) {
	s := newServer(t, moleculetest.WithRateLimit(0, 0))
	r := call(t, s, "GET", "/health", nil, "")
	if r.header.Get("X-RateLimit-Limit") != "unlimited" {
		t.Errorf("header %q", r.header.Get("X-RateLimit-Limit"))
	}
}

func TestRateLimitDefault(t *testing.T) {
	s := newServer(t)
	r := call(t, s, "GET", "/health", nil, "")
	if r.header.Get("X-RateLimit-Limit") != "600" || r.header.Get("X-RateLimit-Remaining") != "599" {
		t.Errorf("headers %v", r.header)
	}
}

// otherToken is tok with its first character changed: a valid-looking token
// that is certainly not tok (a fixed replacement letter would equal tok's
// own first letter one time in 64).
func otherToken(tok string) string {
	if tok[0] == 'x' {
		return "y" + tok[1:]
	}
	return "x" + tok[1:]
}
