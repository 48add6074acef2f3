package memory_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// MOLECULE_HISTORY_TURNS=0: the stages get no Store (memory.New returns
// nil), the handler gets the conversation's name but no history, replies
// carry no message text for memory, and nothing is written to the memory stream.
func TestTurnsZeroTouchesNoBucket(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	off, err := memory.New(w.Obs.JS, w.Obs.Topo, memory.Config{Turns: 0})
	if err != nil || off != nil {
		t.Fatalf("memory.New with 0 turns = %v, %v; want nil, nil", off, err)
	}
	h := newSeenBy()
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h})
	w.WaitSeeded(w.Agent.ID)
	w.SendCanvas("one")
	w.SendPeer(0, "two")
	w.WaitReplies(2, 20*time.Second)
	pl.Stop(t)

	for text, conv := range map[string]string{"one": events.ConversationCanvas, "two": "peer-" + w.Peers[0].ID} {
		req := h.request(t, text)
		if req.Conversation != conv || req.History != nil {
			t.Errorf("%s: conversation %q, history %v; want %q and none", text, req.Conversation, req.History, conv)
		}
		entry, err := w.Obs.Topo.Handled.Get(pipelinetest.Ctx(t), events.HandledKey(w.Agent.ID, w.SentText(text).ActivityID))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(entry.Value(), []byte(`"inbound_text"`)) || bytes.Contains(entry.Value(), []byte(`"conversation"`)) {
			t.Errorf("%s: the recorded reply carries memory fields: %s", text, entry.Value())
		}
	}
	if n := w.StreamMsgs(w.Obs.Topo.Memory); n != 0 {
		t.Errorf("the memory stream holds %d messages, want 0", n)
	}
}
