package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Guarantee: between two Molecule Relays an agent-to-agent message is
// handled once. Relay A answers a peer message from B; A's replier dies
// after the platform accepted its POST /workspaces/B/a2a and before its
// "sent" record, so A's next replier posts again with the same messageId
// and the platform's poll queue writes a second row on B's feed. Relay B
// (its own NATS server, restarted between the two rows) de-duplicates on
// the sender's messageId: its handler runs once.
func TestE2EPeerDuplicateRemovedAtReceiver(t *testing.T) {
	t.Parallel()
	// On 2026-05: the 2026-08 platform keeps one row per messageId, so the
	// second post writes no row at all (moleculetest TestOneRowPerMessageID).
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1, Platform: []moleculetest.Option{moleculetest.WithGeneration(moleculetest.Gen2026_05)}})
	peer := w.Peers[0]

	// Relay B: its own NATS, poller and dispatcher for workspace B; its
	// handler records and answers nothing (no reply loop back to A).
	natsB := natstest.Start(t)
	procB := relayProc(t, w, natsB.ClientURL())
	recB := pipelinetest.NewRecorder(handler.Func(func(context.Context, *handler.Request) (string, error) { return "", nil }))
	dispB := w.NewDispatcher(procB, recB, dispatcher.Config{})
	pipelinetest.Start(t, dispB.Run)
	pollB := w.NewPoller(procB, poller.Config{Workspaces: []*molecule.Client{w.Client(peer)}})
	pipelinetest.Start(t, pollB.Run)

	// Relay A, with a replier that dies after the platform's acceptance.
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoReplier: true})
	defer pl.Stop(t)
	proc1 := w.Proc()
	var crashed atomic.Bool
	var run1 *pipelinetest.Running
	kill := func(_ context.Context, r *events.Reply) error {
		if r.Text != "echo: crash me" || !crashed.CompareAndSwap(false, true) {
			return nil
		}
		proc1.Kill()
		run1.Cancel()
		return errKilled
	}
	run1 = pipelinetest.Start(t, crashpoint.RunReplier(w.NewReplier(proc1, nil, replier.Config{}).Run, &crashpoint.Replier{AfterPost: kill}))
	w.WaitSeeded(w.Agent.ID)
	pipelinetest.Eventually(t, 15*time.Second, "relay B's cursor seeded", func() bool {
		_, err := procB.Topo.Cursors.Get(pipelinetest.Ctx(t), peer.ID)
		return err == nil
	})
	w.SendPeer(0, "crash me")
	pipelinetest.Eventually(t, 15*time.Second, "the replier crash", crashed.Load)
	<-run1.Done()
	pipelinetest.Eventually(t, 15*time.Second, "relay B to handle the first post", func() bool { return recB.Completions() == 1 })

	// NATS of relay B restarts: the messageId claim is a stored record,
	// not the stream's in-memory duplicate window.
	natsB.Restart(t)

	pipelinetest.Start(t, w.NewReplier(w.Proc(), nil, replier.Config{}).Run)
	target := w.SentText("crash me")
	posts := func() (n int) {
		for _, r := range w.PeerReplies(peer.ID) {
			if r.Params.Message.Metadata.InReplyTo == target.ActivityID {
				n++
			}
		}
		return n
	}
	pipelinetest.Eventually(t, 20*time.Second, "A's second post of the same reply", func() bool { return posts() == 2 })
	pipelinetest.Eventually(t, 20*time.Second, "relay B to take the second row as a duplicate", func() bool {
		return dispB.Stats().PeerDuplicates == 1
	})
	if n := recB.Completions(); n != 1 || len(recB.Calls()) != 1 {
		t.Fatalf("relay B's handler ran %d times (%d calls) for one peer message posted twice; want once", n, len(recB.Calls()))
	}
}

// relayProc is a process of a second relay on its own NATS server.
func relayProc(t *testing.T, w *pipelinetest.World, url string) *pipelinetest.Proc {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topo, err := events.EnsureTopology(ctx, js, w.Topology)
	if err != nil {
		t.Fatal(err)
	}
	return &pipelinetest.Proc{NC: nc, JS: js, Topo: topo}
}
