package mcpchannel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The handshake declares the claude/channel capability and the tools; a
// canvas message becomes one notification with the TypeScript channel's
// meta keys and header; reply_to_workspace answers it with exactly one
// /notify, and reports it posted.
func TestReplyToolAnswersCanvasMessageOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := startRelay(t, w)
	cl := connect(t, r)
	if _, ok := cl.init.Capabilities.Experimental[mcpchannel.Capability]; !ok {
		t.Fatalf("capabilities.experimental lacks %q: %+v", mcpchannel.Capability, cl.init.Capabilities.Experimental)
	}
	if cl.init.Capabilities.Tools == nil {
		t.Fatal("no tools capability")
	}

	sentAt := time.Now()
	w.SendCanvas("hello from the canvas")
	n := cl.next(20 * time.Second)
	shownIn := time.Since(sentAt)
	sent := w.SentText("hello from the canvas")
	want := map[string]string{
		"source": "molecule", "kind": "canvas_user", "workspace_id": w.Agent.ID, "watching_as": w.Agent.ID,
		"peer_id": "", "activity_id": sent.ActivityID,
	}
	for k, v := range want {
		if n.Meta[k] != v {
			t.Errorf("meta[%s] = %q, want %q", k, n.Meta[k], v)
		}
	}
	if ts, err := time.Parse(time.RFC3339Nano, n.Meta["ts"]); err != nil || !ts.Equal(sent.CreatedAt) {
		t.Errorf("meta.ts = %q (%v), want %s", n.Meta["ts"], err, sent.CreatedAt)
	}
	lines := strings.Split(n.Content, "\n")
	if lines[0] != "[from canvas user · workspace="+w.Agent.ID+"]" || lines[1] != "hello from the canvas" ||
		!strings.Contains(lines[len(lines)-1], `reply_to_workspace({workspace_id: "`+w.Agent.ID+`", activity_id: "`+sent.ActivityID+`"`) {
		t.Errorf("content:\n%s", n.Content)
	}

	callAt := time.Now()
	text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": sent.ActivityID, "text": "hi, canvas"})
	if isErr || !strings.Contains(text, "Replied to the canvas user") {
		t.Fatalf("reply: %q (error %v)", text, isErr)
	}
	t.Logf("shown %s after the send; the reply tool returned, posted, in %s", shownIn, time.Since(callAt))
	notes := w.Plat.Notifications(w.Agent.ID)
	if len(notes) != 1 || notes[0].Message != "hi, canvas" {
		t.Fatalf("notifies = %+v, want one with the answer", notes)
	}
	// The same message cannot be answered twice.
	if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": sent.ActivityID, "text": "again"}); !isErr {
		t.Fatalf("a second answer was accepted: %q", text)
	}
}

// A peer's message is answered over A2A to that peer, exactly once, with
// its in_reply_to; without activity_id the oldest waiting message of the
// peer named by peer_id is the one answered.
func TestReplyToolAnswersPeerMessageOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	r := startRelay(t, w)
	cl := connect(t, r)
	peer := w.Peers[0].ID

	w.SendPeer(0, "question from a peer")
	n := cl.next(20 * time.Second)
	sent := w.SentText("question from a peer")
	if n.Meta["kind"] != "peer_agent" || n.Meta["peer_id"] != peer || n.Meta["activity_id"] != sent.ActivityID {
		t.Fatalf("meta = %v", n.Meta)
	}
	// The double ignores include=peer_info, as the platform in the field
	// does: the name comes from the workspace's peer list (no role there).
	if first := strings.SplitN(n.Content, "\n", 2)[0]; first != "[from peer-0 · peer_id="+peer+" · watching="+w.Agent.ID+"]" {
		t.Errorf("header = %q", first)
	}
	if n.Meta["peer_name"] != "peer-0" || n.Meta["peer_role"] != "" {
		t.Errorf("meta peer_name %q, peer_role %q", n.Meta["peer_name"], n.Meta["peer_role"])
	}
	// peer_id of another sender does not match this message.
	if _, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"text": "x"}); !isErr {
		t.Fatal("a canvas reply (no peer_id) answered a peer's message")
	}
	text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"peer_id": peer, "text": "the answer"})
	if isErr || !strings.Contains(text, "peer "+peer) {
		t.Fatalf("reply: %q (error %v)", text, isErr)
	}
	replies := w.PeerReplies(peer)
	if len(replies) != 1 || replies[0].Text() != "the answer" || replies[0].Params.Message.Metadata.InReplyTo != sent.ActivityID {
		t.Fatalf("A2A replies to the peer = %+v, want one answering %s", replies, sent.ActivityID)
	}
	if n := len(w.Plat.Notifications(w.Agent.ID)); n != 0 {
		t.Fatalf("%d notifies for a peer's message", n)
	}
}

// dismiss records the message handled and sends nothing; delegate_task to
// a workspace that does not exist says so rather than pretending, and
// list_peers reads the platform.
func TestDismissSendsNothingAndAgentToolsAreHonest(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	r := startRelay(t, w)
	cl := connect(t, r)

	w.SendCanvas("nothing to say")
	n := cl.next(20 * time.Second)
	id := n.Meta["activity_id"]
	// internal/delegate asks through the platform, which knows no such
	// workspace: delegate_task says so rather than pretending.
	if text, isErr := cl.call(mcpchannel.ToolDelegate, map[string]any{"peer_id": "00000000-0000-4000-8000-000000000000", "task": "help", "timeout_seconds": 5}); !isErr || !strings.Contains(text, "not found") {
		t.Errorf("delegate_task to a workspace that does not exist: %q (error %v)", text, isErr)
	}
	if text, isErr := cl.call(mcpchannel.ToolPeers, nil); isErr || !strings.Contains(text, w.Peers[0].ID) {
		t.Errorf("list_peers: %q (error %v)", text, isErr)
	}
	text, isErr := cl.call(mcpchannel.ToolDismiss, map[string]any{"activity_id": id})
	if isErr || !strings.Contains(text, "Dismissed") {
		t.Fatalf("dismiss: %q (error %v)", text, isErr)
	}
	e, err := w.Obs.Topo.Handled.Get(pipelinetest.Ctx(t), events.HandledKey(w.Agent.ID, id))
	if err != nil || !strings.Contains(string(e.Value()), events.OutcomeNoReply) {
		t.Fatalf("handled record: %v %v", err, e)
	}
	if got := w.Replies(); got != 0 {
		t.Fatalf("%d replies after a dismiss", got)
	}
}
