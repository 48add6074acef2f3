package mcpchannel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// TestPeerInfoMetaKeys: a peer message's envelope with the 2026-08
// platform's include=peer_info fields gets the TypeScript channel's meta
// keys peer_name, peer_role and agent_card_url (enteros-mcp-claude-channel
// 4255a28 server.ts:603-627), names sanitised as always
// (peer_name_sanitised_test.go) and the URL only when it is a plain
// http(s) URL; a canvas message gets none of them.
func TestPeerInfoMetaKeys(t *testing.T) {
	peer := "33333333-3333-4333-8333-333333333333"
	card := "https://acme.moleculesai.app/registry/discover/" + peer
	in := &events.Inbound{
		WorkspaceID: "11111111-1111-4111-8111-111111111111", ActivityID: "22222222-2222-4222-8222-222222222222",
		Source: events.SourcePeerAgent, SourceWorkspaceID: peer, Text: "hi", CreatedAt: time.Unix(1700000000, 0),
		PeerName: "Review\nBot", PeerRole: "reviewer", AgentCardURL: card,
	}
	m := mcpchannel.NewNotification(in).Meta
	if m["peer_name"] != "Review Bot" || m["peer_role"] != "reviewer" || m["agent_card_url"] != card {
		t.Errorf("meta %v", m)
	}
	for _, bad := range []string{`https://x.example/"><inject`, "javascript:alert(1)", "https://x.example/a b", "/registry/discover/" + peer,
		"https://x.example/" + strings.Repeat("a", 600)} {
		c := *in
		c.AgentCardURL = bad
		if v, ok := mcpchannel.NewNotification(&c).Meta["agent_card_url"]; ok {
			t.Errorf("agent_card_url %q passed as %q", bad, v)
		}
	}
	canvas := *in
	canvas.Source, canvas.SourceWorkspaceID = events.SourceCanvasUser, ""
	cm := mcpchannel.NewNotification(&canvas).Meta
	for _, k := range []string{"peer_name", "peer_role", "agent_card_url"} {
		if _, ok := cm[k]; ok {
			t.Errorf("canvas meta has %s", k)
		}
	}
}
