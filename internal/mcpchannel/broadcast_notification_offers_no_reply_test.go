package mcpchannel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/events"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
)

// A broadcast reaches Claude with meta kind "broadcast" and, instead of the
// reply call, a line saying no reply is sent (the relay answers no
// broadcast: docs/protocol.md, "Broadcasts").
func TestBroadcastNotificationOffersNoReply(t *testing.T) {
	in := &events.Inbound{
		WorkspaceID: "11111111-1111-4111-8111-111111111111", ActivityID: "22222222-2222-4222-8222-222222222222",
		Source: events.SourcePeerAgent, SourceWorkspaceID: "33333333-3333-4333-8333-333333333333",
		Kind: events.KindBroadcast, Text: "Broadcast from announcer: maintenance", CreatedAt: time.Unix(1700000000, 0),
	}
	n := mcpchannel.NewNotification(in)
	if n.Meta["kind"] != "broadcast" || n.Meta["peer_id"] != in.SourceWorkspaceID {
		t.Errorf("meta %v", n.Meta)
	}
	if strings.Contains(n.Content, "reply_to_workspace") || !strings.Contains(n.Content, "no reply is sent") {
		t.Errorf("content offers a reply:\n%s", n.Content)
	}
	in.Kind = ""
	if n := mcpchannel.NewNotification(in); n.Meta["kind"] != "peer_agent" || !strings.Contains(n.Content, "reply_to_workspace") {
		t.Errorf("a peer message: %v\n%s", n.Meta, n.Content)
	}
}
