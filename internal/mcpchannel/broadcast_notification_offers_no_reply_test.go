package mcpchannel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
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

// Through the whole channel: a broadcast reaches Claude marked as one, and
// a reply to it is recorded as handled, sent to no one, and the tool says
// so rather than reporting a reply sent.
func TestReplyToBroadcastIsNotSentAndSaysSo(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	announcer := w.Plat.CreateChild(w.Agent.ID, "announcer")
	w.Plat.SetBroadcastEnabled(announcer.ID, true)
	r := startRelay(t, w)
	cl := connect(t, r)
	if code, body, err := w.Plat.Broadcast(pipelinetest.Ctx(t), announcer, "all hands at noon"); err != nil || code != 200 {
		t.Fatalf("broadcast: %d %s %v", code, body, err)
	}
	n := cl.next(20 * time.Second)
	if n.Meta["kind"] != "broadcast" || n.Meta["peer_id"] != announcer.ID || !strings.Contains(n.Content, "all hands at noon") {
		t.Fatalf("notification %v\n%s", n.Meta, n.Content)
	}
	text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "noted"})
	if isErr || !strings.Contains(text, "not sent") || !strings.Contains(text, "broadcast") {
		t.Fatalf("reply: %q (error %v)", text, isErr)
	}
	if got := w.Requests("POST", "/workspaces/"+announcer.ID+"/a2a", 0); got != 0 {
		t.Errorf("%d POSTs to the announcer", got)
	}
}
