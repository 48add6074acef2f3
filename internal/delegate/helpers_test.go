package delegate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// askPrefix is the canvas text that makes relay A's handler ask its peer.
const askPrefix = "ask: "

// newAsker is relay A's Asker on process p (its asks bucket, A's client).
func newAsker(t testing.TB, w *pipelinetest.World, p *pipelinetest.Proc) *delegate.Asker {
	t.Helper()
	a, err := delegate.New(delegate.Config{Asks: p.Topo.Asks,
		Clients: map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}, Logger: pipelinetest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// askingHandler is relay A's agent: a canvas message "ask: <q>" is asked
// of peer, and the canvas gets "peer says: <answer>"; a timeout is
// answered "peer did not answer". Anything else is echoed.
func askingHandler(a *delegate.Asker, peer string, timeout time.Duration) handler.Func {
	return func(ctx context.Context, req *handler.Request) (string, error) {
		in := req.Message
		q, ok := strings.CutPrefix(in.Text, askPrefix)
		if !ok {
			return handler.Echo.Handle(ctx, req)
		}
		s := a.Session(delegate.Scope{Workspace: in.WorkspaceID, Activity: in.ActivityID, ContextID: in.ContextID, Deadline: req.Deadline, Hops: in.Hops})
		ans, err := s.Ask(ctx, handler.Question{PeerID: peer, Text: q, Timeout: timeout})
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, delegate.ErrNoAnswer) {
				return "peer did not answer", nil
			}
			return "", err
		}
		return "peer says: " + ans.Text, nil
	}
}

// peerAgent is relay B's agent: it answers "B: <text>" and records the
// role and hop count of what it was asked ("user 1").
func peerAgent(roles chan<- string) handler.Func {
	return func(ctx context.Context, req *handler.Request) (string, error) {
		select {
		case roles <- fmt.Sprintf("%s %d", req.Message.Role, req.Message.Hops):
		default:
		}
		return "B: " + req.Message.Text, nil
	}
}

// notifies is the canvas answers relay A posted, in order.
func notifies(w *pipelinetest.World) []string {
	var out []string
	for _, n := range w.Plat.Notifications(w.Agent.ID) {
		out = append(out, n.Message)
	}
	return out
}

// askRecord reads question n of activity's handler run on relay A.
func askRecord(t testing.TB, w *pipelinetest.World, activity string, n int) *events.AskRecord {
	t.Helper()
	e, err := w.Obs.Topo.Asks.Get(pipelinetest.Ctx(t), events.AskKey(w.Agent.ID, delegate.MessageID(w.Agent.ID, activity, n)))
	if err != nil {
		t.Fatalf("ask record %d of %s: %v", n, activity, err)
	}
	var rec events.AskRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return &rec
}

// questionsTo counts relay A's A2A posts to peer.
func questionsTo(w *pipelinetest.World, peer string) int {
	n := 0
	for _, c := range w.Plat.A2ACalls(peer) {
		if c.CallerID == w.Agent.ID {
			n++
		}
	}
	return n
}

// bareTopology is a NATS server of the test's own with the relay's
// topology on it, for tests that drive the asks bucket directly; ctx
// bounds the test's NATS calls.
func bareTopology(t *testing.T) (context.Context, *events.Topology) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, topo
}

// timedAsking is askingHandler asking peer for proc, with the time each
// Ask took: asks returns them so far.
func timedAsking(b *testing.B, w *pipelinetest.World, proc *pipelinetest.Proc, peer string) (timed handler.Func, asks func() []time.Duration) {
	var mu sync.Mutex
	var took []time.Duration
	ask := askingHandler(newAsker(b, w, proc), peer, 20*time.Second)
	timed = func(ctx context.Context, req *handler.Request) (string, error) {
		start := time.Now()
		text, err := ask(ctx, req)
		mu.Lock()
		took = append(took, time.Since(start))
		mu.Unlock()
		return text, err
	}
	return timed, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), took...)
	}
}
