package moleculetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A broadcast writes a broadcast_receive row, without request_body and
// with the message cut at 120 runes in its summary, to every other
// non-removed workspace of the sender's org, announces it with
// BROADCAST_MESSAGE (the whole message) and no ACTIVITY_LOGGED, and logs
// broadcast_sent on the sender's feed. enteros-core aeec8e47
// workspace-server/internal/handlers/workspace_broadcast.go:63-176.
func TestBroadcastReachesEveryOtherWorkspaceOfTheOrg(t *testing.T) {
	s := newServer(t)
	root := s.CreateWorkspace("root")
	a := s.CreateChild(root.ID, "ext-A")
	b := s.CreateChild(a.ID, "ext-B")
	gone := s.CreateChild(root.ID, "ext-gone")
	other := s.CreateWorkspace("other-org")
	s.Delete(gone.ID)
	s.SetBroadcastEnabled(a.ID, true)
	st := openSSE(t, s, b.ID, b.Token)
	if f := st.next(t, 5*time.Second); f != ": ping\n" {
		t.Fatalf("first frame %q", f)
	}

	long := strings.Repeat("é", 130)
	code, body, err := s.Broadcast(context.Background(), a, long)
	if err != nil || code != 200 || !jsonEqual(t, body, `{"status":"sent","delivered":2}`) {
		t.Fatalf("broadcast: %d %s %v", code, body, err)
	}
	e := st.event(t)
	if e.Type != "BROADCAST_MESSAGE" || e.Data["message"] != long || e.Data["sender_id"] != a.ID || e.Data["sender"] != "ext-A" {
		t.Errorf("event %+v", e)
	}
	st.none(t, 50*time.Millisecond) // no ACTIVITY_LOGGED

	for _, ws := range []moleculetest.Workspace{root, b} {
		rows := call(t, s, "GET", "/workspaces/"+ws.ID+"/activity?type=broadcast_receive", bearerH(ws.Token), "").array(t)
		if len(rows) != 1 {
			t.Fatalf("%s: %d broadcast rows, want 1", ws.Name, len(rows))
		}
		r := rows[0]
		want := "Broadcast from ext-A: " + strings.Repeat("é", 120) + "…"
		if r["method"] != "broadcast" || r["source_id"] != a.ID || r["summary"] != want || r["status"] != "ok" || r["request_body"] != nil {
			t.Errorf("%s: row %v", ws.Name, r)
		}
	}
	for _, ws := range []moleculetest.Workspace{a, other} {
		if rows := call(t, s, "GET", "/workspaces/"+ws.ID+"/activity?type=broadcast_receive", bearerH(ws.Token), "").array(t); len(rows) != 0 {
			t.Errorf("%s got %d broadcast rows", ws.Name, len(rows))
		}
	}
	sent := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=broadcast_sent", bearerH(a.Token), "").array(t)
	if len(sent) != 1 || sent[0]["summary"] != "Broadcast sent to 2 workspace(s)" || sent[0]["source_id"] != nil {
		t.Errorf("sender's log %v", sent)
	}
}

// Who may broadcast: WorkspaceAuth (router.go:310), a message
// (workspace_broadcast.go:53-58), and the broadcast ability (74-80).
func TestBroadcastRefusals(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	path := "/workspaces/" + a.ID + "/broadcast"
	expect(t, call(t, s, "POST", path, nil, `{"message":"x"}`), 401, `{"error":"missing workspace auth token"}`)
	expect(t, call(t, s, "POST", path, bearerH(b.Token), `{"message":"x"}`), 401, `{"error":"invalid workspace auth token"}`)
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{}`), 400, `{"error":"message is required"}`)
	expect(t, call(t, s, "POST", path, bearerH(a.Token), `{"message":"x"}`), 403,
		`{"error":"broadcast_disabled","hint":"This workspace does not have the broadcast ability. Ask a user or admin to enable it via PATCH /workspaces/:id/abilities."}`)
	if rows := s.Rows(b.ID); len(rows) != 0 {
		t.Errorf("a refused broadcast wrote %d rows", len(rows))
	}
	// 2026-05 has no such endpoint.
	old := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	c := old.CreateWorkspace("ext-C")
	old.SetBroadcastEnabled(c.ID, true)
	expect(t, call(t, old, "POST", "/workspaces/"+c.ID+"/broadcast", bearerH(c.Token), `{"message":"x"}`), 404, "")
}
