package chaos_test

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/chaos"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var (
	flagRelayBin   = flag.String("chaos.relay-bin", "", "run this molecule-relay binary instead of building the working tree's (to measure another commit with the same scenario)")
	flagNodeEvery  = flag.Duration("chaos.node-every", 12*time.Second, "cluster: a node is SIGKILLed this often, in rotation")
	flagNodeDown   = flag.Duration("chaos.node-down", 3*time.Second, "cluster: how long a killed node stays down")
	flagNodeTerm   = flag.Bool("chaos.node-term", false, "cluster: stop nodes with SIGTERM (nats-server steps down from its leaderships first) instead of SIGKILL")
	flagStageKills = flag.Bool("chaos.stage-kills", true, "cluster: SIGKILL a random stage every 2-5 s as well")
	flagLogDir     = flag.String("chaos.log-dir", "", "cluster: write the stages' logs here and keep them (default: a temporary directory)")
)

// crashLoopBackOff is how long the harness waits before it restarts a
// stage that exited by itself: the first back-off of a Kubernetes
// CrashLoopBackOff. A stage is expected never to exit while NATS is only
// failing over, so any such exit is counted and fails the test.
const crashLoopBackOff = 10 * time.Second

// electionOvershootMax is how long a message may still wait in a leg of
// its way once every group that leg needs (stream, consumer, bucket) has a
// leader again: the relay's own share of a node loss. A request sent to
// the leader that died is given up after stage.AttemptTimeout and tried
// again; a failed pull is retried after at most 0.5 s (stage's
// backoffDelay); the rest is room for a loaded 2-core machine. The
// election itself (4 to 9 s, nats-server raft.go) is not the relay's and
// is not bounded here; nor are a SIGKILLed stage's AckWait and a platform
// fault's retry delay, which the attribution names separately.
const electionOvershootMax = stage.AttemptTimeout + 3*time.Second

// TestChaosCluster is TestChaos on a three-node NATS cluster (the
// configuration of infra/nats, real nats-server processes on 127.0.0.1)
// with every stream and bucket on three replicas: one node is SIGKILLed
// and restarted -chaos.node-down later, in rotation every
// -chaos.node-every, while random stages are SIGKILLed as in TestChaos.
// The stages run as the cluster's admin user with the default topology
// mode (ensure), so each start-up meets whatever election is going on.
//
// Besides TestChaos's checks it asserts that no stage exited by itself (a
// stage must wait out a cluster without quorum, not exit), and it prints
// the redeliveries of work already done, counted from the stages' logs.
//
// It also says where the time went: the stages export their spans to the
// test (spanSink), which cuts each message's way into legs (poll, publish,
// inbound stream, records, handler, reply stream, post); the nodes'
// monitoring endpoints say when each stream, consumer and bucket had no
// leader (leaderWatch). Every message slower than 2 s, and than 10 s, is
// attributed to its longest leg and to an election of a group that leg
// needs, a stage SIGKILL, a retry after a platform fault, or nothing
// found.
func TestChaosCluster(t *testing.T) {
	if *flagMsgs <= 0 {
		t.Skip("cluster chaos test: run make chaos-cluster (-chaos.msgs=N)")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	dir := t.TempDir()
	relayBin := *flagRelayBin
	if relayBin == "" {
		relayBin = buildRelay(t, dir)
	}
	c := clustertest.Start(t)
	defer clustertest.RemoveBinaries()
	_, js := c.Connect(t, clustertest.UserAdmin)
	tctx, tcancel := context.WithTimeout(context.Background(), 60*time.Second)
	topo, err := events.EnsureTopology(tctx, js, events.TopologyConfig{Replicas: 3})
	tcancel()
	if err != nil {
		t.Fatal(err)
	}

	plat, agent, peers := chaosPlatform(t, seed)
	hs := newHandlerServer(t)
	sink := newSpanSink(t)

	env := []string{
		"NATS_USER=" + clustertest.UserAdmin,
		"NATS_PASSWORD=" + clustertest.Password(clustertest.UserAdmin),
		"MOLECULE_STREAM_REPLICAS=3",
		// Info: the redeliveries of handled work are counted from the
		// stages' info lines.
		"MOLECULE_LOG_LEVEL=info",
	}
	// The stages' own spans say when each message reached each hop.
	env = append(env, sink.env()...)
	logDir := dir
	if *flagLogDir != "" {
		logDir = *flagLogDir
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stages := startStagesEnv(t, logDir, relayBin, c.URLs(), plat.URL(), agent, hs.url, env)
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range stages {
				t.Logf("--- tail of %s ---\n%s", s.Name, s.Tail(4000))
			}
		}
	})
	waitSeeded(t, plat, topo, agent.ID)
	injectFaults(plat, agent)

	ctx, stopChaos := context.WithCancel(context.Background())
	defer stopChaos()
	// The supervisor outlives the traffic: a stage that exits during the
	// drain is restarted too, as Kubernetes would.
	superCtx, stopSupervisor := context.WithCancel(context.Background())
	superDone := make(chan struct{})
	defer func() {
		stopSupervisor()
		<-superDone
	}()
	go func() {
		defer close(superDone)
		restartCrashed(superCtx, t, stages)
	}()
	var kills, nodeKills atomic.Int64
	var killed stageKills
	lw := newLeaderWatch(c)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		lw.run(watchCtx)
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		rollNodes(ctx, t, c, lw, &nodeKills)
	}()
	go func() {
		defer wg.Done()
		if *flagStageKills {
			killStages(ctx, t, rand.New(rand.NewPCG(seed+1, seed)), stages, &killed, &kills)
		}
	}()

	start := time.Now()
	ledger := sendTraffic(t, plat, agent, peers, rng, *flagMsgs, *flagRate)
	stopChaos()
	wg.Wait()
	for _, n := range c.Nodes {
		if !n.Running() {
			if err := n.Start(); err != nil {
				t.Fatalf("restart %s after the chaos: %v", n.Name, err)
			}
		}
	}
	for _, s := range stages {
		_ = s.Start() // whatever the last kill left down
	}
	t.Logf("traffic: %d messages in %s, %d stage kills, %d node kills", len(ledger), time.Since(start).Round(time.Millisecond), kills.Load(), nodeKills.Load())

	trafficEnd := time.Now()

	waitAnswered(t, plat, agent, peers, ledger, *flagDrain)
	stopWatch()
	<-watchDone
	if !queuesEmpty(topo, 90*time.Second) {
		// Reported, not fatal: the counts below say what is missing.
		t.Errorf("the inbound and reply queues did not empty within 90 s")
	}
	res := check(t, plat, agent, peers, ledger, hs, js)
	res.kills, res.natsKills, res.seed = kills.Load(), nodeKills.Load(), seed
	res.report(t)

	var selfExits int64
	for _, s := range stages {
		n, _ := s.SelfExits()
		selfExits += n
	}
	handledAgain := countInLogs(t, logDir, "dispatch-", "redelivery of a handled message")
	sentAgain := countInLogs(t, logDir, "reply", "reply already sent; acking the redelivery")
	pullFailed := countInLogs(t, logDir, "", "stage: pull failed")
	splitLatency(plat, agent, peers, ledger, hs)
	worst, slowed := attributeHops(ledger, hs.snapshot(), firstReplies(plat, agent, peers), sink, lw, &killed)
	lw.printLeaderless(start, trafficEnd)
	if slowed && worst.afterLeader > electionOvershootMax {
		t.Errorf("%s waited %s in its leg %q after the groups it needs had a leader again (%s), want at most %s: the relay, not the election, held it",
			worst.text, worst.afterLeader.Round(time.Millisecond), worst.longest.name, groupNames(worst.leaderless), electionOvershootMax)
	}
	fmt.Printf("CHAOS cluster: 3 nodes, R3, a node stopped every %s for %s (SIGTERM %v), stage kills %v; stages that exited by themselves=%d\n",
		*flagNodeEvery, *flagNodeDown, *flagNodeTerm, *flagStageKills, selfExits)
	fmt.Printf("CHAOS redeliveries: inbound redelivered after being handled=%d, replies redelivered after being sent=%d, failed pulls logged=%d\n",
		handledAgain, sentAgain, pullFailed)
	if selfExits > 0 {
		t.Errorf("stages that exited by themselves: %d, want 0 (a stage waits for the cluster)", selfExits)
	}
}

// startStagesEnv is startStages with extra environment (the cluster's
// user and replicas).
func startStagesEnv(t *testing.T, dir, bin, natsURL, platURL string, agent moleculetest.Workspace, handlerURL string, extra []string) []*chaos.Process {
	t.Helper()
	env := append(stageEnv(natsURL, platURL, agent, handlerURL), extra...)
	var procs []*chaos.Process
	add := func(name, cmd string) {
		procs = append(procs, chaos.NewProcess(name, bin, []string{cmd}, env, filepath.Join(dir, name+".log")))
	}
	if *flagConnect {
		// Direct posting's crash points under SIGKILL: the connect
		// process's dispatcher posts through its own replier; the second
		// dispatcher, alone in its process, publishes to the reply stream
		// for that replier.
		add("connect", "connect")
		add("dispatch-2", "dispatch")
	} else {
		add("poll", "poll")
		for i := range dispatchers {
			add(fmt.Sprintf("dispatch-%d", i+1), "dispatch")
		}
		add("reply", "reply")
	}
	for _, p := range procs {
		t.Cleanup(p.Stop)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	return procs
}

// stageEnv is the environment of every relay process of the chaos tests
// (natsURL empty: an embedded server).
func stageEnv(natsURL, platURL string, agent moleculetest.Workspace, handlerURL string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"NATS_URL=" + natsURL,
		"MOLECULE_PLATFORM_URL=" + platURL,
		"MOLECULE_WORKSPACE_ID=" + agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + agent.Token,
		"MOLECULE_HANDLER=http:" + handlerURL,
		"MOLECULE_POLL_INTERVAL=1s",
		"MOLECULE_RECONCILE_SKEW=" + reconcileSkew,
	}
}

// rollNodes SIGKILLs one node every -chaos.node-every, in rotation, and
// starts it again -chaos.node-down later.
func rollNodes(ctx context.Context, t *testing.T, c *clustertest.Cluster, lw *leaderWatch, kills *atomic.Int64) {
	start := time.Now()
	for i := 0; pause(ctx, *flagNodeEvery-*flagNodeDown); i++ {
		n := c.Nodes[i%len(c.Nodes)]
		sig, at := "SIGKILL", time.Now()
		if *flagNodeTerm {
			sig = "SIGTERM"
			n.Stop()
		} else {
			n.Kill()
		}
		lw.killed(n.Name, at)
		kills.Add(1)
		t.Logf("chaos %6.1fs: %s node %s (at %s, as in the stages' logs)", time.Since(start).Seconds(), sig, n.Name, at.UTC().Format("15:04:05.000"))
		pause(context.Background(), *flagNodeDown)
		if err := n.Start(); err != nil {
			t.Errorf("restart node %s: %v", n.Name, err)
			return
		}
	}
}

// killStages SIGKILLs a random stage every 2–5 s and restarts it within
// half a second, as a process manager would.
func killStages(ctx context.Context, t *testing.T, rng *rand.Rand, stages []*chaos.Process, killed *stageKills, kills *atomic.Int64) {
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for pause(ctx, killMin+time.Duration(rng.Int64N(int64(killMax-killMin)))) {
		s := stages[rng.IntN(len(stages))]
		if !s.Kill() {
			continue // down after exiting by itself: restartCrashed's
		}
		kills.Add(1)
		killed.add(s.Name, time.Now())
		t.Logf("chaos %6.1fs: SIGKILL %s", time.Since(start).Seconds(), s.Name)
		restartSoon(t, rng, &wg, s)
	}
}

// restartCrashed restarts a stage that exited by itself after
// crashLoopBackOff, as Kubernetes would, and logs why it exited.
func restartCrashed(ctx context.Context, t *testing.T, stages []*chaos.Process) {
	seen := map[*chaos.Process]int64{}
	for pause(ctx, 200*time.Millisecond) {
		for _, s := range stages {
			n, at := s.SelfExits()
			if n == 0 || s.Running() {
				continue
			}
			if seen[s] != n {
				seen[s] = n
				t.Logf("chaos: %s exited by itself (%d so far); restarting it in %s:\n%s", s.Name, n, crashLoopBackOff, s.Tail(600))
			}
			if time.Since(at) >= crashLoopBackOff {
				if err := s.Start(); err != nil {
					t.Errorf("restart %s: %v", s.Name, err)
				}
			}
		}
	}
}

// splitLatency prints where the send-to-reply time went: from the send to
// the handler's answer (poll, inbound stream, dispatcher pull), and from
// the answer to the reply on the platform (handled record, reply stream,
// replier).
func splitLatency(plat *moleculetest.Server, agent moleculetest.Workspace, peers []moleculetest.Workspace, ledger []*sent, hs *handlerServer) {
	first := firstReplies(plat, agent, peers)
	runs := hs.snapshot()
	var toHandler, toReply []time.Duration
	type slow struct {
		text, activity   string
		handler, reply   time.Duration
		deliveries, runs int
	}
	var slowest []slow
	for _, s := range ledger {
		rs, ok := runs[s.text]
		at, answered := first[s.text]
		if !ok || len(rs) == 0 || !answered {
			continue
		}
		h := rs[0].at
		for _, r := range rs[1:] {
			if r.at.Before(h) {
				h = r.at
			}
		}
		toHandler = append(toHandler, h.Sub(s.postedAt))
		toReply = append(toReply, at.Sub(h))
		slowest = append(slowest, slow{s.text, rs[0].activityID, h.Sub(s.postedAt), at.Sub(h), int(rs[len(rs)-1].delivery), len(rs)})
	}
	fmt.Printf("CHAOS latency send->handler answered: %s; handler answered->reply on the platform: %s\n", pcts(toHandler), pcts(toReply))
	printStalls(ledger, runs, first)
	slices.SortFunc(slowest, func(a, b slow) int { return int((b.handler + b.reply) - (a.handler + a.reply)) })
	for _, x := range slowest[:min(5, len(slowest))] {
		fmt.Printf("CHAOS slow: %s (activity %s) send->handler %s, handler->reply %s (handler runs %d, last delivery %d)\n",
			x.text, x.activity, x.handler.Round(time.Millisecond), x.reply.Round(time.Millisecond), x.runs, x.deliveries)
	}
}

// firstReplies is when the first reply to each sent text reached the
// platform.
func firstReplies(plat *moleculetest.Server, agent moleculetest.Workspace, peers []moleculetest.Workspace) map[string]time.Time {
	first := map[string]time.Time{}
	for _, r := range replies(plat, agent, peers) {
		text := strings.TrimPrefix(r.text, "re: ")
		if at, ok := first[text]; !ok || r.at.Before(at) {
			first[text] = r.at
		}
	}
	return first
}

func pcts(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	at := func(p float64) time.Duration {
		return d[min(max(int(p*float64(len(d))+0.5)-1, 0), len(d)-1)].Round(time.Millisecond)
	}
	return fmt.Sprintf("p50=%s p95=%s max=%s", at(0.5), at(0.95), at(1))
}

// queuesEmpty is waitQueuesEmpty that reports instead of failing.
func queuesEmpty(topo *events.Topology, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		empty := true
		for _, c := range []jetstream.Consumer{topo.Dispatcher, topo.Replier} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			info, err := c.Info(ctx)
			cancel()
			if err != nil || info.NumPending+uint64(info.NumAckPending)+uint64(info.NumRedelivered) > 0 {
				empty = false
			}
		}
		if empty {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		pause(context.Background(), 100*time.Millisecond)
	}
}

// countInLogs counts the lines holding what in the logs of the processes
// whose name starts with prefix.
func countInLogs(t *testing.T, dir, prefix, what string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte(what))
	}
	return n
}

// printStalls prints the longest times each path stood still: no handler
// answered (inbound path: poller, inbound stream, dispatchers) or no reply
// reached the platform (reply path: handled record, reply stream,
// replier) for over 2 s while messages waited in it, with when (UTC, as
// in the stages' logs and the node kills above) and how many were in it
// when it moved again. A stall much longer than one election (4–9 s) is
// what to look into.
func printStalls(ledger []*sent, runs map[string][]handlerRun, first map[string]time.Time) {
	type span struct{ from, to time.Time } // entered the path, left it
	var in, out []span
	for _, s := range ledger {
		rs, ok := runs[s.text]
		at, answered := first[s.text]
		if !ok || len(rs) == 0 || !answered {
			continue
		}
		h := rs[0].at
		for _, r := range rs[1:] {
			if r.at.Before(h) {
				h = r.at
			}
		}
		in = append(in, span{s.postedAt, h})
		out = append(out, span{h, at})
	}
	stalls := func(name string, spans []span) {
		ends := make([]time.Time, len(spans))
		for i, x := range spans {
			ends[i] = x.to
		}
		slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
		type gap struct {
			from, to time.Time
			waiting  int
		}
		var gaps []gap
		for i := 1; i < len(ends); i++ {
			if ends[i].Sub(ends[i-1]) < 2*time.Second {
				continue
			}
			g := gap{from: ends[i-1], to: ends[i]}
			for _, x := range spans {
				if x.from.Before(g.to) && !x.to.Before(g.to) { // in the path when it moved again
					g.waiting++
				}
			}
			if g.waiting > 0 {
				gaps = append(gaps, g)
			}
		}
		slices.SortFunc(gaps, func(a, b gap) int { return cmp.Compare(b.to.Sub(b.from), a.to.Sub(a.from)) })
		for _, g := range gaps[:min(3, len(gaps))] {
			fmt.Printf("CHAOS stall: %s path stood still %s, %s to %s UTC, %d messages waiting in it\n", name,
				g.to.Sub(g.from).Round(time.Millisecond), g.from.UTC().Format("15:04:05.000"), g.to.UTC().Format("15:04:05.000"), g.waiting)
		}
	}
	stalls("inbound", in)
	stalls("reply", out)
}

func groupNames(ls []leaderless) string {
	return strings.Join(dedupGroups(ls), ", ")
}
