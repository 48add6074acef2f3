package delegate_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// A relay and a TypeScript channel agent told to answer every message
// (role "user", no metadata: neither the hop count nor in_reply_to can
// follow it) would answer each other forever. The loop guard's peer
// streak stops the exchange after PeerStreak turns; after a pause longer
// than PeerStreakGap, a real question from that peer is answered.
func TestE2ELoopWithAutoAnsweringPeerStops(t *testing.T) {
	t.Parallel()
	const streak, gap = 3, 2 * time.Second
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	startStandIn(t, w, peer, tsChannelAnswer(func(q string) string { return "again: " + q }))
	rec := pipelinetest.NewRecorder(handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		return "got: " + req.Message.Text, nil
	}))
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: rec,
		Dispatcher: dispatcher.Config{PeerStreak: streak, PeerStreakGap: gap}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)

	first := time.Now()
	sendAsTSChannel(t, w, peer.ID, "hello")
	// The peer's (streak+1)-th message is not handled: the exchange ends.
	pipelinetest.Eventually(t, 20*time.Second, "the peer's last message settled", func() bool {
		in, _ := w.Queued()
		return in == 0 && len(w.Sent()) >= streak+1 && pl.Dispatcher.Stats().Handled >= streak+1
	})
	if n := repliesTo(w, peer.ID); n != streak {
		t.Fatalf("the relay answered the auto-answering peer %d times, want %d (before: forever)", n, streak)
	}
	if n := len(rec.Calls()); n != streak {
		t.Errorf("handler ran %d times, want %d", n, streak)
	}
	took := time.Since(first)

	// A pause longer than the gap, then a real question.
	pipelinetest.Eventually(t, 2*gap+5*time.Second, "the pause", func() bool {
		s := w.Sent()
		return time.Since(s[len(s)-1].CreatedAt) > gap
	})
	sendAsTSChannel(t, w, peer.ID, "a real question")
	pipelinetest.Eventually(t, 20*time.Second, "the real question answered", func() bool {
		for _, c := range w.Plat.A2ACalls(peer.ID) {
			if c.CallerID == w.Agent.ID && strings.Contains(string(c.Body), "got: a real question") {
				return true
			}
		}
		return false
	})
	t.Logf("loop stopped after %d turns in %s", streak, took.Round(time.Millisecond))
}

// sendAsTSChannel posts text from peer to the agent as the TypeScript
// channel's reply_to_workspace does (tsChannelAnswer).
func sendAsTSChannel(t *testing.T, w *pipelinetest.World, from, text string) {
	t.Helper()
	var ws = w.Peers[0]
	if ws.ID != from {
		t.Fatalf("sendAsTSChannel: unknown peer %s", from)
	}
	h, body := tsChannelAnswer(func(string) string { return text })(ws, question{})
	if st, resp, err := w.Plat.SendRaw(pipelinetest.Ctx(t), w.Agent.ID, h, body); err != nil || st != http.StatusOK {
		t.Fatalf("send as the TypeScript channel: %d %s %v", st, resp, err)
	}
}

// repliesTo counts the relay's A2A posts to peer.
func repliesTo(w *pipelinetest.World, peer string) int { return questionsTo(w, peer) }

// A burst from a peer without hop count is no loop: messages it sent
// before we answered the one before do not lengthen its streak, so all
// are answered, even one at a time.
func TestE2EBurstFromPeerWithoutHopCountIsAnswered(t *testing.T) {
	t.Parallel()
	const streak, burst = 3, 12
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Dispatcher: dispatcher.Config{Config: stage.Config{Concurrency: 1}, PeerStreak: streak, PeerStreakGap: time.Minute}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	for i := range burst {
		sendAsTSChannel(t, w, peer.ID, fmt.Sprintf("burst %d", i))
	}
	pipelinetest.Eventually(t, 30*time.Second, "the burst answered", func() bool { return repliesTo(w, peer.ID) == burst })
	if s := pl.Dispatcher.Stats(); s.Skipped != 0 {
		t.Errorf("%d messages of the burst not answered", s.Skipped)
	}
}
