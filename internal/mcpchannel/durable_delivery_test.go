package mcpchannel_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Messages that arrive while no client is connected wait in JetStream
// (the poller runs, the dispatcher does not) and are shown once each when
// a client connects.
func TestMessagesQueuedWithoutClientShownOnceOnConnect(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	r := startRelay(t, w)
	w.SendCanvas("queued 0")
	w.SendPeer(0, "queued 1")
	w.SendCanvas("queued 2")
	pipelinetest.Eventually(t, 20*time.Second, "three messages stored", func() bool {
		in, _ := w.Queued()
		return in == 3
	})
	if got := r.Channel().Waiting(); got != 0 {
		t.Fatalf("%d messages handed to the channel with no client", got)
	}

	cl := connect(t, r)
	shown := map[string]mcpchannel.Notification{}
	for range 3 {
		n := cl.next(20 * time.Second)
		if _, dup := shown[n.Meta["activity_id"]]; dup {
			t.Fatalf("message %s shown twice", n.Meta["activity_id"])
		}
		shown[n.Meta["activity_id"]] = n
	}
	for id, n := range shown {
		if text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": id, "peer_id": n.Meta["peer_id"], "text": "answer to " + id}); isErr {
			t.Fatalf("reply %s: %s", id, text)
		}
	}
	w.WaitReplies(3, 20*time.Second)
	sent := w.Sent()
	if len(sent) != 3 {
		t.Fatalf("%d messages on the feed", len(sent))
	}
	for _, s := range sent {
		if _, ok := shown[s.ActivityID]; !ok {
			t.Errorf("message %q never shown", s.Text)
		}
	}
	if got := w.Replies(); got != 3 {
		t.Fatalf("%d replies, want 3", got)
	}
	select {
	case n := <-cl.notes:
		t.Fatalf("an answered message was shown again: %v", n.Meta)
	default:
	}
}

// A client that goes away before answering hands the message back: the
// next client is shown it again and answers it; after that it is never
// shown or answered again.
func TestClientGoneMidAnswerShownAgainNeverAnsweredTwice(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := startRelay(t, w)

	first := connect(t, r)
	w.SendCanvas("answer me later")
	n1 := first.next(20 * time.Second)
	id := n1.Meta["activity_id"]
	first.disconnect()
	if got := w.Replies(); got != 0 {
		t.Fatalf("%d replies for a message nobody answered", got)
	}

	second := connect(t, r)
	n2 := second.next(30 * time.Second) // after the dispatcher's retry delay
	if n2.Meta["activity_id"] != id {
		t.Fatalf("second client was shown %s, want %s again", n2.Meta["activity_id"], id)
	}
	if text, isErr := second.call(mcpchannel.ToolReply, map[string]any{"activity_id": id, "text": "answered at last"}); isErr {
		t.Fatalf("reply: %s", text)
	}
	second.disconnect()

	third := connect(t, r)
	w.SendCanvas("a later message")
	n3 := third.next(20 * time.Second)
	if n3.Meta["activity_id"] == id {
		t.Fatalf("an answered message was shown again")
	}
	if text, isErr := third.call(mcpchannel.ToolReply, map[string]any{"activity_id": id, "text": "twice?"}); !isErr {
		t.Fatalf("an answered message was answered again: %s", text)
	}
	notes := w.Plat.Notifications(w.Agent.ID)
	if len(notes) != 1 || notes[0].Message != "answered at last" {
		t.Fatalf("notifies = %+v, want exactly one answer", notes)
	}
}
