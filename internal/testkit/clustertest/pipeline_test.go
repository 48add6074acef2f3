package clustertest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// stageTopology looks up, as a stage's own user, the part of the topology
// that stage uses (events.LookupTopology, MOLECULE_TOPOLOGY=lookup). The
// stage users may not create or update anything (accounts.conf): an admin
// created it.
// stageMemory is the conversation memory of a stage, 100 turns.
func stageMemory(t *testing.T, js jetstream.JetStream, topo *events.Topology) *memory.Store {
	t.Helper()
	m, err := memory.New(js, topo, memory.Config{Turns: 100})
	if err != nil {
		t.Fatalf("memory.New: %v", err)
	}
	return m
}

func stageTopology(t *testing.T, js jetstream.JetStream, stage string, cfg events.TopologyConfig) *events.Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo, err := events.LookupTopology(ctx, js, cfg, stage)
	if err != nil {
		t.Fatalf("%s: look up the topology: %v", stage, err)
	}
	return topo
}

// testLogger discards stage logs unless CLUSTERTEST_LOG is set.
func testLogger(stage string) *slog.Logger {
	if os.Getenv("CLUSTERTEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("stage", stage)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestPipelineSurvivesNodeKill runs the real poller, dispatcher (two
// workers) and replier, each as its own least-privilege user, against the
// three-node cluster with R3 streams and the platform double. Mid-run it
// kills the inbound stream's leader and later restarts it. Every message
// sent must come back as exactly one reply.
func TestPipelineSurvivesNodeKill(t *testing.T) {
	c := clustertest.Start(t)
	_, admin := c.Connect(t, clustertest.UserAdmin)
	// Short ack waits (and store timeouts below): a delivery whose ack, or a
	// record write whose answer, was lost in the failover is retried within
	// seconds instead of the production 30 s / 60 s, so the test can wait
	// for everything to settle.
	tcfg := events.TopologyConfig{Replicas: 3, DispatcherAckWait: 4 * time.Second, ReplierAckWait: 4 * time.Second, HistoryTurns: 100}
	topo := ensureTopologyConfig(t, admin, tcfg)

	// The platform's rate limit is not under test here; the fast poll
	// interval alone would exhaust the default 600 a minute.
	plat := moleculetest.NewServer(moleculetest.WithRateLimit(1_000_000, time.Minute))
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("cluster-agent")
	client := func() *molecule.Client {
		cl, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: ws.ID, Token: ws.Token, Logger: testLogger("client")})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}

	// Registered in poll mode before anything is sent, as the poller's
	// first run would do.
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if _, err := client().Register(rctx, molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
		t.Fatalf("register: %v", err)
	}

	_, pollJS := c.Connect(t, clustertest.UserPoller)
	p, err := poller.New(pollJS, stageTopology(t, pollJS, events.StagePoller, tcfg), poller.Config{
		Workspaces:    []*molecule.Client{client()},
		PollInterval:  100 * time.Millisecond,
		BacklogWindow: time.Hour,
		Logger:        testLogger(events.StagePoller),
	})
	if err != nil {
		t.Fatalf("poller.New: %v", err)
	}
	echo, err := handler.Parse("echo", handler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var dispatchers []*dispatcher.Dispatcher
	for i := range 2 {
		_, js := c.Connect(t, clustertest.UserDispatcher)
		dtopo := stageTopology(t, js, events.StageDispatcher, tcfg)
		d, err := dispatcher.New(js, dtopo, echo, dispatcher.Config{
			Config: stage.Config{Concurrency: 4, StoreTimeout: 3 * time.Second, Logger: testLogger(fmt.Sprintf("dispatcher-%d", i))},
			Memory: stageMemory(t, js, dtopo),
		})
		if err != nil {
			t.Fatalf("dispatcher.New: %v", err)
		}
		dispatchers = append(dispatchers, d)
	}
	_, replJS := c.Connect(t, clustertest.UserReplier)
	rtopo := stageTopology(t, replJS, events.StageReplier, tcfg)
	r, err := replier.New(replJS, rtopo, map[string]*molecule.Client{ws.ID: client()},
		replier.Config{Config: stage.Config{Concurrency: 4, StoreTimeout: 3 * time.Second, Logger: testLogger(events.StageReplier)}, Memory: stageMemory(t, replJS, rtopo)})
	if err != nil {
		t.Fatalf("replier.New: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second+2*settleTimeout)
	defer cancel()
	// The stages' own context has no deadline: with one, the dispatcher and
	// the replier act as deadline-bounded drains (no handler may start
	// that could not finish before it).
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	runErrs := make(chan error, 4)
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && runCtx.Err() == nil {
				runErrs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	run("poller", p.Run)
	for i, d := range dispatchers {
		run(fmt.Sprintf("dispatcher %d", i), d.Run)
	}
	run("replier", r.Run)
	defer func() {
		stop()
		wg.Wait()
	}()

	const total = 24
	sent := map[string]bool{}
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			text := fmt.Sprintf("message %02d", i)
			st, body, err := plat.SendCanvas(ctx, ws.ID, text)
			if err != nil || st != 200 {
				t.Fatalf("send %q: %d %s %v", text, st, body, err)
			}
			sent["echo: "+text] = true
		}
	}
	waitReplies := func(n int) {
		t.Helper()
		if err := pollCond(time.Until(deadlineOf(ctx)), func() bool {
			select {
			case err := <-runErrs:
				t.Fatalf("stage stopped: %v", err)
			default:
			}
			return len(plat.Notifications(ws.ID)) >= n
		}); err != nil {
			t.Fatalf("%d of %d replies after %s", len(plat.Notifications(ws.ID)), n, time.Since(deadlineOf(ctx).Add(-45*time.Second)))
		}
	}

	send(0, total/3)
	waitReplies(total / 6)
	info, err := topo.Inbound.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.Node(info.Cluster.Leader)
	victim.Kill()
	t.Logf("killed %s (inbound stream leader) with %d of %d replies posted", victim.Name, len(plat.Notifications(ws.ID)), total/3)
	send(total/3, 2*total/3)
	waitReplies(total / 2)
	victim.Restart(t)
	t.Logf("restarted %s", victim.Name)
	send(2*total/3, total)
	waitReplies(total)

	// Let everything settle: both work queues empty and nothing in flight,
	// so a late duplicate would have been posted by now.
	for _, pair := range [][2]string{{events.StreamInbound, events.ConsumerDispatcher}, {events.StreamReply, events.ConsumerReplier}} {
		var last *jetstream.ConsumerInfo
		if err := pollCond(settleTimeout, func() bool {
			ci, err := admin.Consumer(ctx, pair[0], pair[1])
			if err != nil {
				return false
			}
			last = ci.CachedInfo()
			return last.NumPending == 0 && last.NumAckPending == 0
		}); err != nil {
			t.Errorf("consumer %s/%s did not settle: %+v", pair[0], pair[1], last)
		}
	}
	stop()
	wg.Wait()

	got := map[string]int{}
	var texts []string
	for _, n := range plat.Notifications(ws.ID) {
		got[n.Message]++
		texts = append(texts, n.Message)
	}
	sort.Strings(texts)
	for text := range sent {
		if got[text] != 1 {
			t.Errorf("reply %q posted %d times, want once", text, got[text])
		}
	}
	if len(texts) != total {
		t.Errorf("%d notifications for %d messages: %v", len(texts), total, texts)
	}
	// Conversation memory worked on the cluster, each turn once (it is
	// best-effort: a write during the failover may be missing).
	turns, _, err := memory.Read(ctx, admin, topo, ws.ID, events.ConversationCanvas)
	seen := map[string]bool{}
	for _, tn := range turns {
		if seen[tn.ActivityID+tn.Role] {
			t.Errorf("turn %s/%s recorded twice", tn.ActivityID, tn.Role)
		}
		seen[tn.ActivityID+tn.Role] = true
	}
	if err != nil || len(turns) < total {
		t.Errorf("the canvas conversation holds %d turns (%v), want at least %d of %d", len(turns), err, total, 2*total)
	}
	// The stages did all of it within their users' permissions.
	if errs := c.ClientErrors(); strings.Contains(errs, "permissions violation") {
		t.Errorf("a stage was refused something it needs:\n%s", errs)
	}
	dlq, err := topo.DLQ.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dlq.State.Msgs != 0 {
		t.Errorf("%d dead letters", dlq.State.Msgs)
	}
}

// settleTimeout bounds the wait for both consumers to have nothing pending
// after the last reply. Usually instant; after a failover a reply whose
// sent-record write timed out has been seen to need two redeliveries and
// about 25 s to be reconciled (with 4 s ack waits and 3 s store timeouts).
var settleTimeout = 40 * time.Second

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
