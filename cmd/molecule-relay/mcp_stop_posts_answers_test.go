package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Claude answered two messages and the session is stopped the way Claude
// Code stops it (SIGINT, SIGTERM at +100 ms, SIGKILL at +500 ms) while the
// second answer is still in the reply queue: the replier, one post at a
// time, is busy with the first (the platform takes 150 ms). mcp posts the
// queued answer before it exits (exit 0, before the SIGKILL) instead of
// leaving it to the next session; before, it stayed queued.
func TestMCPStopPostsTheAnswersClaudeGave(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	w := newMCPWorld(t, "MOLECULE_REPLY_CONCURRENCY=1", "NATS_URL="+ns.ClientURL())
	// The second answer must be seen queued while the first is posted; on
	// a machine too slow for that 150 ms window, the round is tried again.
	for round := range 3 {
		p := w.session()
		w.sendCanvas(fmt.Sprint("first ", round))
		w.sendCanvas(fmt.Sprint("second ", round))
		var shown []map[string]string
		for range 2 {
			meta, _ := p.nextMessage(20 * time.Second)
			shown = append(shown, meta)
		}
		before := len(w.plat.Notifications(w.ws.ID))
		w.plat.InjectFault(moleculetest.Fault{Method: "POST", PathPrefix: "/workspaces/" + w.ws.ID + "/notify", Latency: 150 * time.Millisecond, Count: 1})
		// Claude's answers, without waiting for the tool results (which
		// wait for the post).
		for i, meta := range shown {
			p.send(map[string]any{"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": map[string]any{
				"name": "reply_to_workspace", "arguments": map[string]any{"activity_id": meta["activity_id"], "text": "ok"}}})
		}
		queued := false
		pipelinetest.Eventually(t, 10*time.Second, "the second answer queued or posted", func() bool {
			queued = replyQueued(t, js) > 0
			return queued || len(w.plat.Notifications(w.ws.ID)) == before+2
		})
		if !queued {
			t.Logf("round %d: both answers were posted before the stop could begin; again", round)
			p.stopClaudeWay()
			continue
		}
		took := p.stopClaudeWay()
		if p.code != 0 {
			t.Fatalf("exit %d after %s (137: SIGKILLed), want 0:\n%s", p.code, took, p.stderr.String())
		}
		if n := len(w.plat.Notifications(w.ws.ID)) - before; n != 2 {
			t.Fatalf("%d of 2 answers posted when the process exited (after %s), %d left queued:\n%s",
				n, took, replyQueued(t, js), p.stderr.String())
		}
		t.Logf("SIGINT → exit %s, both answers posted", took.Round(time.Millisecond))
		return
	}
	t.Fatal("in 3 rounds the second answer was never seen queued")
}

// replyQueued is what the reply queue holds (pending and taken).
func replyQueued(t *testing.T, js jetstream.JetStream) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, events.StreamReply, events.ConsumerReplier)
	if err != nil {
		return 0
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0
	}
	return info.NumPending
}
