package mcpchannel_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// pull calls a pull tool and decodes its JSON answer into v.
func (cl *claude) pull(name string, args map[string]any, v any) {
	cl.t.Helper()
	text, isErr := cl.call(name, args)
	if isErr {
		cl.t.Fatalf("%s: %s", name, text)
	}
	if err := json.Unmarshal([]byte(text), v); err != nil {
		cl.t.Fatalf("%s: %v (%s)", name, err, text)
	}
}

// wait_for_message returns the message waiting for an answer without
// taking it, as the platform's does (a2a_tools_inbox.py
// tool_wait_for_message): again and again until it is answered, with the
// ids reply_to_workspace needs; then it waits and says it timed out.
func TestWaitForMessageReturnsTheMessageUntilItIsAnswered(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	if !strings.Contains(cl.init.Instructions, mcpchannel.ToolWaitForMessage) {
		t.Errorf("instructions do not tell a client without channel events to pull: %q", cl.init.Instructions)
	}
	w.SendCanvas("pull me")
	var first, again map[string]any
	cl.pull(mcpchannel.ToolWaitForMessage, map[string]any{"timeout_secs": 20}, &first)
	cl.pull(mcpchannel.ToolWaitForMessage, map[string]any{"timeout_secs": 20}, &again)
	if first["text"] != "pull me" || first["kind"] != "canvas_user" || first["workspace_id"] != w.Agent.ID || first["activity_id"] == "" {
		t.Fatalf("wait_for_message = %v", first)
	}
	if again["activity_id"] != first["activity_id"] {
		t.Fatalf("a message not answered was not returned again: %v then %v", first["activity_id"], again["activity_id"])
	}
	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": first["activity_id"], "text": "pulled"}); isErr {
		t.Fatalf("reply: %s", text)
	}
	var none map[string]any
	start := time.Now()
	cl.pull(mcpchannel.ToolWaitForMessage, map[string]any{"timeout_secs": 0.3}, &none)
	if none["timeout"] != true || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("wait_for_message after the answer = %v after %s, want a timeout after 0.3 s", none, time.Since(start))
	}
	if notes := w.Plat.Notifications(w.Agent.ID); len(notes) != 1 || notes[0].Message != "pulled" {
		t.Fatalf("notifies = %+v, want the one answer", notes)
	}
}

// inbox_peek lists the waiting messages without taking them; inbox_pop
// settles one without a reply (handled, nothing sent, never offered
// again), and a pop after the reply, or a second pop, removes nothing and
// says the message is handled, as the platform's idempotent pop does.
func TestInboxPeekListsAndInboxPopSettlesWithoutAReply(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	cl := connect(t, startRelay(t, w))
	w.SendCanvas("drop me")
	w.SendPeer(0, "answer me")
	var listed []map[string]string
	pipelinetest.Eventually(t, 20*time.Second, "two messages waiting", func() bool {
		cl.pull(mcpchannel.ToolInboxPeek, map[string]any{}, &listed)
		return len(listed) == 2
	})
	byText := map[string]map[string]string{}
	for _, m := range listed {
		byText[m["text"]] = m
	}
	drop, peer := byText["drop me"], byText["answer me"]
	if drop == nil || peer == nil || peer["peer_id"] != w.Peers[0].ID || peer["kind"] != "peer_agent" {
		t.Fatalf("inbox_peek = %v", listed)
	}

	var popped map[string]any
	cl.pull(mcpchannel.ToolInboxPop, map[string]any{"activity_id": drop["activity_id"]}, &popped)
	if popped["removed"] != true {
		t.Fatalf("inbox_pop of a waiting message = %v", popped)
	}
	cl.pull(mcpchannel.ToolInboxPeek, map[string]any{}, &listed)
	if len(listed) != 1 || listed[0]["activity_id"] != peer["activity_id"] {
		t.Fatalf("inbox_peek after the pop = %v, want only the peer's message", listed)
	}
	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": peer["activity_id"], "peer_id": peer["peer_id"], "text": "answered"}); isErr {
		t.Fatalf("reply: %s", text)
	}
	for _, id := range []string{drop["activity_id"], peer["activity_id"]} {
		var again map[string]any
		cl.pull(mcpchannel.ToolInboxPop, map[string]any{"activity_id": id}, &again)
		if again["removed"] != false || again["handled"] != true {
			t.Errorf("inbox_pop of handled message %s = %v, want removed false, handled true", id, again)
		}
	}
	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": drop["activity_id"], "text": "late"}); !isErr {
		t.Fatalf("a popped message was answered after all: %s", text)
	}
	if got, notes := w.Replies(), w.Plat.Notifications(w.Agent.ID); got != 1 || len(notes) != 0 {
		t.Fatalf("%d replies and notifies %+v, want only the peer's answer", got, notes)
	}
}

// A channel client keeps the push: the message is shown once as a channel
// event, a pull of it returns the same message (not a second delivery),
// and it is answered once whichever way it was seen.
func TestChannelClientKeepsThePushAndAPullIsTheSameMessage(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	w.SendCanvas("seen both ways")
	n := cl.next(20 * time.Second)
	var pulled map[string]any
	cl.pull(mcpchannel.ToolWaitForMessage, map[string]any{"timeout_secs": 5}, &pulled)
	if pulled["activity_id"] != n.Meta["activity_id"] || pulled["content"] != n.Content {
		t.Fatalf("pulled %v, pushed %v", pulled, n)
	}
	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "once"}); isErr {
		t.Fatalf("reply: %s", text)
	}
	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "twice"}); !isErr {
		t.Fatalf("second answer accepted: %s", text)
	}
	select {
	case again := <-cl.notes:
		t.Fatalf("shown again after a pull: %v", again.Meta)
	default:
	}
	if notes := w.Plat.Notifications(w.Agent.ID); len(notes) != 1 || notes[0].Message != "once" {
		t.Fatalf("notifies = %+v", notes)
	}
}
