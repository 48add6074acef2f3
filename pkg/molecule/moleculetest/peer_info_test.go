package moleculetest_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

const peerFileMsg = `{"jsonrpc":"2.0","id":"r1","method":"message/send","params":{"message":{"role":"user","messageId":"pf-1","parts":[` +
	`{"kind":"text","text":"see file"},{"kind":"file","file":{"uri":"workspace:a.pdf","mime_type":"application/pdf","name":"a.pdf"}},` +
	`{"type":"image","uri":"workspace:b.png","name":"b.png"},{"kind":"file","file":{}}]}}}`

// TestPeerInfoAddsPeerFields: on 2026-08, include=peer_info (enteros-core
// aeec8e47 workspace-server/internal/handlers/activity.go:318-319) adds to
// a peer's row the sender's workspace name and role (a LEFT JOIN on
// source_id, 458-461), agent_card_url = <platform URL>/registry/discover/<source_id>
// and attachments[] flattened from the request body (635-652, 115); a
// canvas row (source_id null) gets none of the peer fields, and a row
// without file parts no attachments. Without the flag the row is as before.
func TestPeerInfoAddsPeerFields(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	s.SetRole(b.ID, "researcher")
	if code, _, err := s.SendCanvas(context.Background(), a.ID, "from canvas"); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	peer := hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID)
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", peer, peerFileMsg), 200, "")

	p := "/workspaces/" + a.ID + "/activity?type=a2a_receive&include=peer_info"
	rows := call(t, s, "GET", p, bearerH(a.Token), "").array(t) // newest first
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	fromPeer, fromCanvas := rows[0], rows[1]
	if fromPeer["peer_name"] != "ext-B" || fromPeer["peer_role"] != "researcher" ||
		fromPeer["agent_card_url"] != s.URL()+"/registry/discover/"+b.ID {
		t.Errorf("peer row: peer_name %v, peer_role %v, agent_card_url %v", fromPeer["peer_name"], fromPeer["peer_role"], fromPeer["agent_card_url"])
	}
	wantAtts := `[{"kind":"file","mime_type":"application/pdf","name":"a.pdf","uri":"workspace:a.pdf"},{"kind":"image","name":"b.png","uri":"workspace:b.png"}]`
	if !jsonEqual(t, []byte(mustJSON(fromPeer["attachments"])), wantAtts) {
		t.Errorf("attachments %v, want %s", mustJSON(fromPeer["attachments"]), wantAtts)
	}
	for _, k := range []string{"peer_name", "peer_role", "agent_card_url", "attachments"} {
		if _, ok := fromCanvas[k]; ok {
			t.Errorf("canvas row has %s: %v", k, fromCanvas[k])
		}
	}
	if _, ok := fromPeer["seq"]; !ok {
		t.Errorf("peer_info row has no seq")
	}

	// A role never set is null in the join: peer_role is left out.
	s.SetRole(b.ID, "")
	rows = call(t, s, "GET", p+"&limit=1", bearerH(a.Token), "").array(t)
	if _, ok := rows[0]["peer_role"]; ok || rows[0]["peer_name"] != "ext-B" {
		t.Errorf("without a role: %v", rows[0])
	}
	plain := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?limit=1", bearerH(a.Token), "").array(t)[0]
	if _, ok := plain["peer_name"]; ok {
		t.Errorf("peer_name without include=peer_info")
	}
	// Forwarded headers name the platform URL (external_connection.go:245).
	h := bearerH(a.Token)
	h.Set("X-Forwarded-Proto", "https")
	h.Set("X-Forwarded-Host", "acme.example")
	rows = call(t, s, "GET", p+"&limit=1", h, "").array(t)
	if rows[0]["agent_card_url"] != "https://acme.example/registry/discover/"+b.ID {
		t.Errorf("agent_card_url behind a proxy %v", rows[0]["agent_card_url"])
	}
}

// TestPeerInfoIgnoredBefore2026_08: the 2026-05 platform (eaf7dbb) has no
// include parameter; it answers the rows as without it.
func TestPeerInfoIgnoredBefore2026_08(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	registerPoll(t, s, a)
	if code, _, err := s.SendPeer(context.Background(), b, a.ID, "hi"); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	with := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?include=peer_info", bearerH(a.Token), "")
	without := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "")
	if with.status != http.StatusOK || string(with.body) != string(without.body) {
		t.Errorf("include=peer_info changed the 2026-05 answer:\n%s\n%s", with.body, without.body)
	}
}
