package moleculetest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The 2026-08 platform's refusals and caller authentication, read from
// enteros-core aeec8e47 workspace-server/internal/handlers (lines named
// per test). Each test also checks that 2026-05 answers as before where the
// behaviour is new.

const peerMsg = `{"jsonrpc":"2.0","id":"req-p","method":"message/send","params":{"message":{"role":"agent","messageId":"p-1","parts":[{"kind":"text","text":"hi peer"}]}}}`

var gen05 = moleculetest.WithGeneration(moleculetest.Gen2026_05)

// TestA2ACallerAuthIsSourceBound pins authenticateA2AHTTPCaller
// (a2a_proxy_helpers.go:991-1109, c1475219): X-Workspace-ID is a claim the
// bearer must back; a same-origin canvas (1014-1016,
// middleware/wsauth_middleware.go:575-600) and ADMIN_TOKEN (1024-1027)
// are canvas-class callers; no bearer is 401 (1018-1022).
func TestA2ACallerAuthIsSourceBound(t *testing.T) {
	s := newServer(t)
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
		{"none", nil, 401, `{"error":"missing caller auth token"}`, ""},
		{"same-origin canvas", s.CanvasHeader(), 200, queued, nil},
		{"same-origin referer", hdr("Referer", s.URL()+"/canvas"), 200, queued, nil},
		{"foreign origin", hdr("Origin", "http://evil.example"), 401, `{"error":"missing caller auth token"}`, ""},
		{"admin bearer", bearerH(s.AdminToken()), 200, queued, nil},
		{"garbage bearer", bearerH("garbage"), 401, `{"error":"invalid caller auth token"}`, ""},
		{"own token no XWID", bearerH(a.Token), 200, queued, a.ID},
		{"TB claiming A", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", a.ID), 401, `{"error":"caller ID does not match workspace auth token"}`, ""},
		{"claim without bearer", hdr("X-Workspace-ID", b.ID), 401, `{"error":"missing caller auth token"}`, ""},
		{"peer B with TB (a relay's reply)", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), 200, queued, b.ID},
		{"X-Source-Workspace-Id is read nowhere", hdr("Authorization", "Bearer "+b.Token, "X-Source-Workspace-Id", a.ID), 200, queued, b.ID},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A messageId of its own: 2026-08 keeps one row per messageId.
			body := strings.Replace(canvasMsg, `"messageId":"m-1"`, fmt.Sprintf(`"messageId":"m-%d"`, i), 1)
			callerRow(t, s, a.ID, tc.h, body, tc.status, tc.want, tc.source)
		})
	}
	// A deleted workspace's token no longer authenticates (1035-1038).
	s.Delete(b.ID)
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), peerMsg)
	expect(t, r, 401, `{"error":"invalid caller auth token"}`)
	// SendCanvas keeps working: it sends the same-origin header.
	if st, body, err := s.SendCanvas(context.Background(), a.ID, "hi"); err != nil || st != 200 {
		t.Errorf("SendCanvas: %d %s %v", st, body, err)
	}
	// 2026-05 took a canvas caller without any header.
	old := newServer(t, gen05)
	c := old.CreateWorkspace("old")
	registerPoll(t, old, c)
	expect(t, call(t, old, "POST", "/workspaces/"+c.ID+"/a2a", nil, canvasMsg), 200, queued)
}

// TestA2ABodyOver16MiBIs413 pins a2a_proxy.go:472-487 (core#2677) and the
// cap maxProxyRequestBody = 16 MiB (81).
func TestA2ABodyOver16MiBIs413(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	big := `{"jsonrpc":"2.0","method":"message/send","params":{"message":{"parts":[{"kind":"text","text":"` +
		strings.Repeat("x", 16<<20) + `"}]}}}`
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", bearerH(a.Token), big)
	expect(t, r, 413, `{"error":"request body exceeds 16777216 byte limit: A2A body exceeds size limit","truncated":true,"max_bytes":16777216}`)
	if n := len(s.Rows(a.ID)); n != 0 {
		t.Errorf("%d rows written for a refused body", n)
	}
}

// TestA2AFromCanDelegateFalseIsToolCallFailed pins a2a_proxy.go:789-797
// (core#2127): a message/send from a workspace with can_delegate=false to
// another workspace is 403 "tool call failed" — a reply to a peer
// included, since the platform cannot tell it from a delegation — while a
// self-call, another method, and a canvas caller pass.
func TestA2AFromCanDelegateFalseIsToolCallFailed(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	registerPoll(t, s, b)
	s.SetCanDelegate(b.ID, false)
	fromB := hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID)
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", fromB, peerMsg), 403, `{"error":"tool call failed"}`)
	if n := len(s.Rows(a.ID)); n != 0 {
		t.Errorf("%d rows written for a refused call", n)
	}
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", fromB, `{"jsonrpc":"2.0","id":"t","method":"tasks/get","params":{"id":"x"}}`), 200, "")
	expect(t, call(t, s, "POST", "/workspaces/"+b.ID+"/a2a", fromB, peerMsg), 200, "")
	expect(t, call(t, s, "POST", "/workspaces/"+b.ID+"/a2a", s.CanvasHeader(), canvasMsg), 200, "")
	s.SetCanDelegate(b.ID, true)
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", fromB, peerMsg), 200, "")

	old := newServer(t, gen05)
	c, d := old.CreateWorkspace("c"), old.CreateWorkspace("d")
	registerPoll(t, old, c)
	registerPoll(t, old, d)
	old.SetCanDelegate(d.ID, false)
	expect(t, call(t, old, "POST", "/workspaces/"+c.ID+"/a2a", hdr("Authorization", "Bearer "+d.Token, "X-Workspace-ID", d.ID), peerMsg), 200, "")
}

// TestA2AOverBudgetIs402 pins a2a_proxy.go:664-695 and 738-740: a target
// over its budget refuses every call with 402 and the periods.
func TestA2AOverBudgetIs402(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	s.SetBudgetExceeded(a.ID, "monthly")
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), peerMsg)
	expect(t, r, 402, `{"error":"workspace budget limit exceeded","exceeded_periods":["monthly"]}`)
}

// TestA2AToWarmingConciergeIs503RetryAfter pins a2a_proxy.go:813-817 and
// 1185-1207 (core#3082): 503 with Retry-After: 5 and warming true, except
// for the concierge's own calls.
func TestA2AToWarmingConciergeIs503RetryAfter(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("concierge")
	registerPoll(t, s, a)
	s.SetConciergeWarming(a.ID, true)
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), canvasMsg)
	expect(t, r, 503, `{"error":"concierge is warming up (verifying management tools) — retry shortly","warming":true,"retry_after":5}`)
	if got := r.header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After %q, want 5", got)
	}
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", bearerH(a.Token), canvasMsg), 200, "")
}

// TestA2AToUnregisteredWorkspaceIsQueued202 pins a2a_proxy.go:933-948,
// 1281-1294 and a2a_proxy_helpers.go:487-515: a target with no URL that is
// still settling (awaiting_agent, provisioning) is queued, 202
// {queued:true, queue_id, …}; one that is offline still gets 503. 2026-05
// answered 503 "workspace has no URL".
func TestA2AToUnregisteredWorkspaceIsQueued202(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("never-registered"), s.CreateWorkspace("caller")
	from := hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID)
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", from, peerMsg)
	if r.status != 202 {
		t.Fatalf("status %d, want 202 (body %s)", r.status, r.body)
	}
	m := r.json(t)
	if m["queued"] != true || m["queue_id"] == "" || m["queue_depth"] != 1.0 ||
		m["message"] != "workspace agent busy — request queued, will dispatch when capacity available" {
		t.Errorf("body %s", r.body)
	}
	s.SetStatus(a.ID, "offline")
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", from, peerMsg), 503, `{"error":"workspace has no URL","status":"offline"}`)

	old := newServer(t, gen05)
	c, d := old.CreateWorkspace("never-registered"), old.CreateWorkspace("caller")
	r = call(t, old, "POST", "/workspaces/"+c.ID+"/a2a", hdr("Authorization", "Bearer "+d.Token, "X-Workspace-ID", d.ID), peerMsg)
	expect(t, r, 503, `{"error":"workspace has no URL","status":"awaiting_agent"}`)
}

// TestNotifyTalkToUserDisabledIs403 pins activity.go:867-878: a workspace
// whose talk_to_user_enabled is false gets 403 talk_to_user_disabled with
// a hint, and nothing is written or broadcast.
func TestNotifyTalkToUserDisabledIs403(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	s.SetTalkToUser(a.ID, false)
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{"message":"hello"}`)
	expect(t, r, 403, `{"error":"talk_to_user_disabled","hint":"This workspace is not allowed to send messages directly to the user. Forward your update to a parent workspace using delegate_task — they may be able to reach the user."}`)
	if n := len(s.Notifications(a.ID)); n != 0 {
		t.Errorf("%d notifications recorded", n)
	}
	if n := len(s.Rows(a.ID)); n != 0 {
		t.Errorf("%d rows written", n)
	}
	// The body is validated first (834-853).
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/notify", bearerH(a.Token), `{}`), 400, `{"error":"message is required"}`)

	old := newServer(t, gen05)
	c := old.CreateWorkspace("old")
	old.SetTalkToUser(c.ID, false)
	expect(t, call(t, old, "POST", "/workspaces/"+c.ID+"/notify", bearerH(c.Token), `{"message":"hello"}`), 200, `{"status":"sent"}`)
}

// TestDeleteNeedsXConfirmName pins workspace_crud.go:664-687: without
// X-Confirm-Name equal to the name, 400
// destructive_action_requires_confirmation and nothing is deleted; a
// removed workspace is 410.
func TestDeleteNeedsXConfirmName(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	s.CreateChild(a.ID, "kid")
	admin := bearerH(s.AdminToken())
	r := call(t, s, "DELETE", "/workspaces/"+a.ID, admin, "")
	expect(t, r, 400, `{"error":"destructive_action_requires_confirmation","hint":"Re-send the same request with header X-Confirm-Name: ext-A","workspace_name":"ext-A","active_tasks":0,"child_count":1}`)
	if st := s.Status(a.ID).Status; st == "removed" {
		t.Fatalf("deleted without confirmation")
	}
	confirmed := hdr("Authorization", "Bearer "+s.AdminToken(), "X-Confirm-Name", "ext-A")
	call(t, s, "DELETE", "/workspaces/"+a.ID, confirmed, "")
	if st := s.Status(a.ID).Status; st != "removed" {
		t.Fatalf("status %q after a confirmed delete", st)
	}
	expect(t, call(t, s, "DELETE", "/workspaces/"+a.ID, confirmed, ""), 410, `{"error":"workspace removed","id":"`+a.ID+`"}`)

	old := newServer(t, gen05)
	c := old.CreateWorkspace("old")
	call(t, old, "DELETE", "/workspaces/"+c.ID, bearerH(old.AdminToken()), "")
	if st := old.Status(c.ID).Status; st != "removed" {
		t.Errorf("2026-05 delete without confirmation: status %q", st)
	}
}

// TestMemoriesWithoutPluginAre503 pins memories.go:165-226 and 346-355:
// without MEMORY_PLUGIN_URL a valid commit (after the body and scope
// checks) and every search answer 503.
func TestMemoriesWithoutPluginAre503(t *testing.T) {
	s := newServer(t, moleculetest.WithoutMemoryPlugin())
	a := s.CreateWorkspace("ext-A")
	missing := `{"error":"memory plugin is not configured (set MEMORY_PLUGIN_URL)"}`
	path := "/workspaces/" + a.ID + "/memories"
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{"content":"x","scope":"LOCAL"}`), 503, missing)
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{"content":"x","scope":"NOPE"}`), 400, `{"error":"scope must be LOCAL, TEAM, or GLOBAL"}`)
	expect(t, call(t, s, "GET", path+"?q=x", bearerH(a.Token), ""), 503, missing)
	r := call(t, s, "GET", path, bearerH(a.Token), "")
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a 503 that will not change", r.header.Get("Retry-After"))
	}

	old := newServer(t, gen05, moleculetest.WithoutMemoryPlugin())
	c := old.CreateWorkspace("old")
	expect(t, call(t, old, "POST", "/workspaces/"+c.ID+"/memories", bearerH(c.Token), `{"content":"x","scope":"LOCAL"}`), 201, "")
}

// TestMemoriesPluginBackedAnswers pins the v2 shim (memories.go:184-201,
// 340-395): a search ignores q and scope and returns {id, content, scope,
// created_at} with created_at to the second; GLOBAL is for root
// workspaces only; a namespace is at most 50 characters.
func TestMemoriesPluginBackedAnswers(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("root")
	kid := s.CreateChild(a.ID, "kid")
	path := "/workspaces/" + a.ID + "/memories"
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{"content":"apples","scope":"LOCAL"}`), 201, "")
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{"content":"pears","scope":"TEAM"}`), 201, "")
	expect(t, call(t, s, "POST", "/workspaces/"+kid.ID+"/memories", bearerH(kid.Token), `{"content":"g","scope":"GLOBAL"}`), 403, `{"error":"only root workspaces can write GLOBAL memories"}`)
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{"content":"x","scope":"LOCAL","namespace":"`+strings.Repeat("n", 51)+`"}`), 400, `{"error":"namespace must be <= 50 characters"}`)
	rows := call(t, s, "GET", path+"?q=apples&scope=LOCAL", bearerH(a.Token), "").array(t)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want both (q and scope are ignored): %v", len(rows), rows)
	}
	if got := strings.Join(keys(rows[0]), ","); got != "content,created_at,id,scope" {
		t.Errorf("row keys %s", got)
	}
	if ts, _ := rows[0]["created_at"].(string); len(ts) != len("2026-08-14T00:00:00Z") {
		t.Errorf("created_at %q is not to the second", ts)
	}

	old := newServer(t, gen05)
	c := old.CreateWorkspace("old")
	call(t, old, "POST", "/workspaces/"+c.ID+"/memories", bearerH(c.Token), `{"content":"apples","scope":"LOCAL"}`)
	call(t, old, "POST", "/workspaces/"+c.ID+"/memories", bearerH(c.Token), `{"content":"pears","scope":"LOCAL"}`)
	if n := len(call(t, old, "GET", "/workspaces/"+c.ID+"/memories?q=apples", bearerH(c.Token), "").array(t)); n != 1 {
		t.Errorf("2026-05 search for apples: %d rows, want 1", n)
	}
}
