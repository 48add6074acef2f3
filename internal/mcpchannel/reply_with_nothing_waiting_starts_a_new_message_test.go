package mcpchannel_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// reply_to_workspace with no message waiting starts a new message to its
// target, as the TypeScript channel's does (server.ts:802-870): without
// peer_id a /notify to the canvas user, posted once however often the
// call is repeated; with peer_id a message/send to that peer, role
// "user", one text part, the same messageId on a repeat. An activity_id
// that is not waiting is still refused. Before, every such call was
// refused ("no message from the canvas user is waiting").
func TestReplyWithNothingWaitingStartsANewMessage(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	cl := connect(t, startRelay(t, w))
	peer := w.Peers[0].ID

	for range 2 {
		if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"text": "hello, unprompted"}); isErr || !strings.Contains(text, "new message to the canvas user") {
			t.Fatalf("canvas: %q (error %v)", text, isErr)
		}
	}
	pipelinetest.Eventually(t, 20*time.Second, "the canvas post", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	if notes := w.Plat.Notifications(w.Agent.ID); len(notes) != 1 || notes[0].Message != "hello, unprompted" {
		t.Fatalf("notifies %+v, want the message once", notes)
	}

	for range 2 {
		if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"peer_id": peer, "text": "hi, peer"}); isErr || !strings.Contains(text, "new message from "+w.Agent.ID) {
			t.Fatalf("peer: %q (error %v)", text, isErr)
		}
	}
	calls := w.PeerReplies(peer)
	if len(calls) != 2 || calls[0].Text() != "hi, peer" || calls[0].Params.Message.MessageID != calls[1].Params.Message.MessageID {
		t.Fatalf("A2A to the peer %+v, want the message with one messageId", calls)
	}
	var body struct {
		Method string `json:"method"`
		Params struct {
			Message struct {
				Role  string `json:"role"`
				Parts []struct {
					Kind string `json:"kind"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal(w.Plat.A2ACalls(peer)[0].Body, &body); err != nil || body.Method != "message/send" ||
		body.Params.Message.Role != "user" || len(body.Params.Message.Parts) != 1 || body.Params.Message.Parts[0].Kind != "text" {
		t.Fatalf("A2A body %+v (%v)", body, err)
	}

	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": "00000000-0000-4000-8000-000000000009", "text": "x"}); !isErr {
		t.Fatalf("an activity_id not waiting was accepted: %q", text)
	}
}
