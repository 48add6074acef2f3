package chaos_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/chaos"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var (
	flagMsgs    = flag.Int("chaos.msgs", 0, "messages to send; 0 skips the chaos test (make chaos, make chaos-long)")
	flagRate    = flag.Float64("chaos.rate", 15, "messages per second")
	flagSeed    = flag.Uint64("chaos.seed", 0, "seed of the traffic, kills and faults; 0 picks one from the clock")
	flagDrain   = flag.Duration("chaos.drain", 4*time.Minute, "how long after the last message every reply must have arrived")
	flagWork    = flag.Duration("chaos.handler-time", 20*time.Millisecond, "mean time the handler works on a message (uniform 0..2x), so that kills land mid-handler")
	flagConnect = flag.Bool("chaos.connect", false, "run the relay as a `connect` process (poller, dispatcher and replier in one, the dispatcher posting directly) and a second `dispatch` process, instead of one process per stage")
)

const (
	peerCount     = 3
	peerShare     = 0.25 // of the messages, from peers
	peerDupShare  = 0.05 // of the peer messages, posted twice with one messageId (a sender that died after acceptance)
	rate429       = 0.01
	rate500       = 0.025 // refused: nothing done
	rate500After  = 0.025 // the work done, then 500
	faultLatency  = 2 * time.Millisecond
	dispatchers   = 2
	killMin       = 2 * time.Second
	killMax       = 5 * time.Second
	natsDownFor   = time.Second
	reconcileSkew = "5s"
)

// sent is one message of the traffic.
type sent struct {
	text      string
	peer      int // -1: a canvas user
	messageID string
	postedAt  time.Time
	twice     bool
}

// TestChaos: see the package doc. It asserts 0 lost, 0 duplicate canvas
// replies, 0 duplicate peer messages handled, 0 misrouted, 0 echo and 0
// dead letters not caused by a permanent refusal, and prints those counts
// and the per-message latency.
func TestChaos(t *testing.T) {
	if *flagMsgs <= 0 {
		t.Skip("chaos test: run make chaos or make chaos-long (-chaos.msgs=N)")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	dir := t.TempDir()
	relayBin := buildRelay(t, dir)
	natsBin := clustertest.ServerBinary(t)
	defer clustertest.RemoveBinaries()

	ns, err := chaos.NewNATS(natsBin, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	if err := ns.StartReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	js := connect(t, ns.URL())
	topo := ensureTopology(t, js)

	plat, agent, peers := chaosPlatform(t, seed)
	hs := newHandlerServer(t)

	stages := startStages(t, dir, relayBin, ns.URL(), plat.URL(), agent, hs.url)
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range append(stages, ns.Process) {
				t.Logf("--- tail of %s ---\n%s", s.Name, s.Tail(3000))
			}
		}
	})
	waitSeeded(t, plat, topo, agent.ID)
	injectFaults(plat, agent)

	ctx, stopChaos := context.WithCancel(context.Background())
	defer stopChaos()
	var kills, natsKills atomic.Int64
	trafficFor := time.Duration(float64(*flagMsgs) / *flagRate * float64(time.Second))
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		runChaos(ctx, t, rand.New(rand.NewPCG(seed+1, seed)), stages, ns, trafficFor, &kills, &natsKills)
	}()

	start := time.Now()
	ledger := sendTraffic(t, plat, agent, peers, rng, *flagMsgs, *flagRate)
	stopChaos()
	<-chaosDone
	for _, s := range stages {
		_ = s.Start() // whatever the last kill left down
	}
	t.Logf("traffic: %d messages in %s, %d stage kills, %d nats-server kills", len(ledger), time.Since(start).Round(time.Millisecond), kills.Load(), natsKills.Load())

	waitAnswered(t, plat, agent, peers, ledger, *flagDrain)
	waitQueuesEmpty(t, topo, 90*time.Second)
	res := check(t, plat, agent, peers, ledger, hs, js)
	res.kills, res.natsKills, res.seed = kills.Load(), natsKills.Load(), seed
	res.report(t)
}

func buildRelay(t *testing.T, dir string) string {
	t.Helper()
	root, err := clustertest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "molecule-relay")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/molecule-relay")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build molecule-relay: %v\n%s", err, out)
	}
	return bin
}

// connect is the harness's own connection; it reconnects forever, across
// the nats-server restart.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// ensureTopology creates the streams with the production AckWaits (the
// events defaults, 8 s), so a SIGKILLed stage's messages come back in
// seconds exactly as in production; the stages run with
// MOLECULE_TOPOLOGY=lookup and keep them.
func ensureTopology(t *testing.T, js jetstream.JetStream) *events.Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func registerPoll(t *testing.T, plat *moleculetest.Server, ws moleculetest.Workspace) {
	t.Helper()
	c, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
		t.Fatalf("register %s: %v", ws.Name, err)
	}
}

// startStages starts 1 poller, the dispatchers and 1 replier (with
// -chaos.connect: a connect process and a dispatch process) as
// molecule-relay processes, stopped at cleanup.
func startStages(t *testing.T, dir, bin, natsURL, platURL string, agent moleculetest.Workspace, handlerURL string) []*chaos.Process {
	t.Helper()
	return startStagesEnv(t, dir, bin, natsURL, platURL, agent, handlerURL, []string{"MOLECULE_TOPOLOGY=lookup", "MOLECULE_LOG_LEVEL=warn"})
}

// waitSeeded waits until the poller registered the agent and saved its
// first cursor, so that every message sent afterwards is new.
func waitSeeded(t *testing.T, plat *moleculetest.Server, topo *events.Topology, ws string) {
	t.Helper()
	eventually(t, 60*time.Second, "the poller to register and seed the agent", func() bool {
		if plat.Status(ws).DeliveryMode != "poll" {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := topo.Cursors.Get(ctx, ws)
		return err == nil
	})
}

// injectFaults: 429 (Retry-After 1 s), 500 before and after the work, and
// latency, on every request of the relay. The traffic's own sends to the
// agent and the poller's event stream are spared (a fault after the
// handler of an endless stream would never answer).
func injectFaults(plat *moleculetest.Server, agent moleculetest.Workspace) {
	spare := []moleculetest.Fault{
		{Method: http.MethodPost, PathPrefix: "/workspaces/" + agent.ID + "/a2a"},
		{Method: http.MethodGet, PathPrefix: "/workspaces/" + agent.ID + "/events"},
	}
	for _, f := range spare {
		plat.InjectFault(f)
	}
	plat.InjectFault(moleculetest.Fault{Status: http.StatusTooManyRequests, Rate: rate429,
		Body: `{"error":"rate limit exceeded","retry_after":1}`, Header: http.Header{"Retry-After": {"1"}}})
	plat.InjectFault(moleculetest.Fault{Status: http.StatusInternalServerError, Rate: rate500, Body: `{"error":"internal error"}`})
	plat.InjectFault(moleculetest.Fault{Status: http.StatusInternalServerError, Rate: rate500After / (1 - rate500 - rate429),
		Body: `{"error":"internal error"}`, AfterHandler: true})
	plat.InjectFault(moleculetest.Fault{Latency: faultLatency})
}

// runChaos SIGKILLs a random stage every 2–5 s and restarts it, and kills
// and restarts nats-server once, 40 % into the traffic.
func runChaos(ctx context.Context, t *testing.T, rng *rand.Rand, stages []*chaos.Process, ns *chaos.NATS, trafficFor time.Duration, kills, natsKills *atomic.Int64) {
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		supervise(ctx, t, stages)
	}()
	for {
		wait := killMin + time.Duration(rng.Int64N(int64(killMax-killMin)))
		if !pause(ctx, wait) {
			return
		}
		if natsKills.Load() == 0 && time.Since(start) > trafficFor*4/10 {
			ns.Kill()
			natsKills.Add(1)
			t.Logf("chaos %6.1fs: SIGKILL nats-server", time.Since(start).Seconds())
			pause(context.Background(), natsDownFor)
			if err := ns.StartReady(30 * time.Second); err != nil {
				t.Errorf("nats-server restart: %v", err)
				return
			}
			continue
		}
		s := stages[rng.IntN(len(stages))]
		if s.Kill() {
			kills.Add(1)
			t.Logf("chaos %6.1fs: SIGKILL %s", time.Since(start).Seconds(), s.Name)
		}
		// A supervisor restarts it after a short while, as a process
		// manager would.
		restartSoon(t, rng, &wg, s)
	}
}

// restartSoon starts s again within half a second, as a process manager
// restarts a killed process; wg counts the restart.
func restartSoon(t *testing.T, rng *rand.Rand, wg *sync.WaitGroup, s *chaos.Process) {
	back := time.Duration(rng.Int64N(int64(500 * time.Millisecond)))
	wg.Add(1)
	go func() {
		defer wg.Done()
		pause(context.Background(), back)
		if err := s.Start(); err != nil {
			t.Errorf("restart %s: %v", s.Name, err)
		}
	}()
}

// supervise restarts a stage that exited by itself (for example at
// start-up while nats-server was down), as a process manager would.
func supervise(ctx context.Context, t *testing.T, stages []*chaos.Process) {
	for pause(ctx, time.Second) {
		for _, s := range stages {
			if !s.Running() {
				if err := s.Start(); err != nil {
					t.Errorf("restart %s: %v", s.Name, err)
				}
			}
		}
	}
}

// pause waits d unless ctx ends first (false).
func pause(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendTraffic sends n messages at rate per second: canvas messages, and a
// quarter from the peers, some of which are posted twice with one
// messageId.
func sendTraffic(t *testing.T, plat *moleculetest.Server, agent moleculetest.Workspace, peers []moleculetest.Workspace, rng *rand.Rand, n int, rate float64) []*sent {
	t.Helper()
	ctx := context.Background()
	interval := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	out := make([]*sent, 0, n)
	for i := range n {
		<-tick.C
		s := &sent{peer: -1, text: fmt.Sprintf("c-%d", i)}
		if rng.Float64() < peerShare {
			s.peer = rng.IntN(len(peers))
			s.text = fmt.Sprintf("p%d-%d", s.peer, i)
			s.messageID = fmt.Sprintf("chaos-%d-%d", rng.Uint32(), i)
			s.twice = rng.Float64() < peerDupShare
		}
		s.postedAt = time.Now()
		posts := 1
		if s.twice {
			posts = 2
		}
		for range posts {
			var code int
			var err error
			if s.peer < 0 {
				code, _, err = plat.SendCanvas(ctx, agent.ID, s.text)
			} else {
				code, _, err = plat.SendRaw(ctx, agent.ID, peerHeader(peers[s.peer]), peerBody(s.messageID, s.text))
			}
			if err != nil || code != http.StatusOK {
				t.Fatalf("send %s: %d %v", s.text, code, err)
			}
		}
		out = append(out, s)
	}
	return out
}

func peerHeader(from moleculetest.Workspace) http.Header {
	h := http.Header{}
	h.Set("X-Workspace-ID", from.ID)
	h.Set("Authorization", "Bearer "+from.Token)
	return h
}

// peerBody is a peer relay's question: relay_hops 1, as internal/delegate
// sends one. The peers send on a clock, not in answer to our replies, yet
// quick replies make them alternate with us as an auto-answering agent
// would; a peer without a hop count would meet the loop guard's streak
// (internal/dispatcher/loopguard.go, pinned by its own tests) and some of
// its messages would go unanswered by design, not by a crash.
func peerBody(messageID, text string) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": messageID, "method": "message/send",
		"params": map[string]any{"message": map[string]any{
			"role": "user", "messageId": messageID,
			"parts":    []any{map[string]any{"kind": "text", "text": text}},
			"metadata": map[string]any{"relay_hops": 1},
		}},
	})
	return b
}

// handlerServer is the dispatchers' http: handler: it records every run
// and answers "re: <text>".
type handlerServer struct {
	url  string
	mu   sync.Mutex
	runs map[string][]handlerRun // by text
}

type handlerRun struct {
	activityID, sender, messageID string
	delivery                      uint64
	start                         time.Time // when the request reached the handler
	at                            time.Time // when the run answered
}

func newHandlerServer(t *testing.T) *handlerServer {
	t.Helper()
	hs := &handlerServer{runs: map[string][]handlerRun{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(hs.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	hs.url = "http://" + l.Addr().String() + "/handle"
	return hs
}

func (hs *handlerServer) serve(w http.ResponseWriter, r *http.Request) {
	var p handler.Payload
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Message == nil {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	m := p.Message
	start := time.Now()
	// The agent works a while, as a real one does: a dispatcher killed
	// now leaves the one window without a guarantee (a re-run).
	if *flagWork > 0 {
		pause(r.Context(), time.Duration(rand.Int64N(int64(2**flagWork))))
	}
	hs.mu.Lock()
	hs.runs[m.Text] = append(hs.runs[m.Text], handlerRun{activityID: m.ActivityID, sender: m.SourceWorkspaceID, messageID: m.MessageID, delivery: p.Delivery, start: start, at: time.Now()})
	hs.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"reply": "re: " + m.Text})
}

func (hs *handlerServer) snapshot() map[string][]handlerRun {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	out := make(map[string][]handlerRun, len(hs.runs))
	for k, v := range hs.runs {
		out[k] = slices.Clone(v)
	}
	return out
}

// reply is one reply the platform accepted from the agent.
type reply struct {
	text      string
	peer      int // -1: notify
	messageID string
	at        time.Time
}

// replies reads every reply of the agent from the platform: its notifies
// and its accepted A2A posts to each peer.
func replies(plat *moleculetest.Server, agent moleculetest.Workspace, peers []moleculetest.Workspace) []reply {
	var out []reply
	for _, n := range plat.Notifications(agent.ID) {
		out = append(out, reply{text: n.Message, peer: -1, at: n.At})
	}
	for i, p := range peers {
		for _, c := range plat.A2ACalls(p.ID) {
			if c.CallerID != agent.ID || c.Status/100 != 2 {
				continue
			}
			var body struct {
				Params struct {
					Message struct {
						MessageID string `json:"messageId"`
						Parts     []struct {
							Text string `json:"text"`
						} `json:"parts"`
					} `json:"message"`
				} `json:"params"`
			}
			_ = json.Unmarshal(c.Body, &body)
			var text strings.Builder
			for _, part := range body.Params.Message.Parts {
				text.WriteString(part.Text)
			}
			out = append(out, reply{text: text.String(), peer: i, messageID: body.Params.Message.MessageID, at: c.At})
		}
	}
	return out
}

// waitAnswered waits until every message has at least one reply, or
// within passes (then check reports the lost ones).
func waitAnswered(t *testing.T, plat *moleculetest.Server, agent moleculetest.Workspace, peers []moleculetest.Workspace, ledger []*sent, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := map[string]bool{}
		for _, r := range replies(plat, agent, peers) {
			got[r.text] = true
		}
		missing := 0
		for _, s := range ledger {
			if !got["re: "+s.text] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("%d messages still unanswered %s after the last one", missing, within)
			return
		}
		pause(context.Background(), 500*time.Millisecond)
	}
}

// waitQueuesEmpty waits until no inbound or reply message is pending or
// in flight, so that a late second post would be seen by check.
func waitQueuesEmpty(t *testing.T, topo *events.Topology, within time.Duration) {
	t.Helper()
	eventually(t, within, "the inbound and reply queues to empty", func() bool {
		for _, c := range []jetstream.Consumer{topo.Dispatcher, topo.Replier} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			info, err := c.Info(ctx)
			cancel()
			if err != nil || info.NumPending+uint64(info.NumAckPending)+uint64(info.NumRedelivered) > 0 {
				return false
			}
		}
		return true
	})
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		pause(context.Background(), 100*time.Millisecond)
	}
}

// result holds the counts the chaos test asserts and prints.
type result struct {
	seed                                   uint64
	messages, canvas, peer, peerTwice      int
	kills, natsKills                       int64
	lost, dupCanvas, dupPeerHandled        int
	misrouted, echo                        int
	dlqTotal, dlqNotPermanent              int
	handlerReruns, peerRepliesPostedTwice  int
	latencies                              []time.Duration
	dlqReasons                             map[string]int
	lostSample, dupSample, misroutedSample []string
}

func check(t *testing.T, plat *moleculetest.Server, agent moleculetest.Workspace, peers []moleculetest.Workspace, ledger []*sent, hs *handlerServer, js jetstream.JetStream) *result {
	t.Helper()
	res := &result{messages: len(ledger), dlqReasons: map[string]int{}}
	byText := map[string]*sent{}
	for _, s := range ledger {
		byText[s.text] = s
		if s.peer < 0 {
			res.canvas++
		} else {
			res.peer++
			if s.twice {
				res.peerTwice++
			}
		}
	}
	got := map[string][]reply{}
	for _, r := range replies(plat, agent, peers) {
		orig, ok := byText[strings.TrimPrefix(r.text, "re: ")]
		if !ok || !strings.HasPrefix(r.text, "re: ") {
			res.echo++ // a reply to something nobody sent: the agent's own output
			continue
		}
		if orig.peer != r.peer {
			res.misrouted++
			res.misroutedSample = append(res.misroutedSample, r.text)
			continue
		}
		got[orig.text] = append(got[orig.text], r)
	}
	for _, s := range ledger {
		rs := got[s.text]
		switch {
		case len(rs) == 0:
			res.lost++
			res.lostSample = append(res.lostSample, s.text)
			continue
		case len(rs) > 1 && s.peer < 0:
			res.dupCanvas++
			res.dupSample = append(res.dupSample, s.text)
		case len(rs) > 1:
			// The agent's replier posted the same reply twice (it died
			// between the platform's acceptance and its record, or the
			// platform did the work and answered 5xx): one messageId,
			// removed by a receiving relay.
			res.peerRepliesPostedTwice++
		}
		res.latencies = append(res.latencies, rs[0].at.Sub(s.postedAt))
	}
	for text, runs := range hs.snapshot() {
		s, ok := byText[text]
		if !ok {
			res.echo++
			continue
		}
		acts := map[string]bool{}
		for _, r := range runs {
			acts[r.activityID] = true
		}
		if s.peer >= 0 && len(acts) > 1 {
			res.dupPeerHandled++
		}
		if len(runs) > len(acts) {
			res.handlerReruns += len(runs) - len(acts)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dls, err := dlq.List(ctx, js, dlq.Filter{})
	if err != nil {
		t.Fatalf("read dead letters: %v", err)
	}
	for _, d := range dls {
		res.dlqTotal++
		res.dlqReasons[d.DeadLetter.Stage+"/"+d.DeadLetter.Reason]++
		if d.DeadLetter.Reason != events.ReasonPermanent {
			res.dlqNotPermanent++
			t.Logf("dead letter: stage %s reason %s deliveries %d: %s", d.DeadLetter.Stage, d.DeadLetter.Reason, d.DeadLetter.Deliveries, d.DeadLetter.Error)
		}
	}
	for name, n := range map[string]int{"lost": res.lost, "duplicate canvas replies": res.dupCanvas,
		"duplicate peer messages handled": res.dupPeerHandled, "misrouted": res.misrouted, "echo": res.echo,
		"dead letters not caused by a permanent refusal": res.dlqNotPermanent} {
		if n != 0 {
			t.Errorf("%s: %d, want 0", name, n)
		}
	}
	return res
}

func (r *result) report(t *testing.T) {
	t.Helper()
	slices.Sort(r.latencies)
	pct := func(p float64) time.Duration {
		if len(r.latencies) == 0 {
			return 0
		}
		i := int(p*float64(len(r.latencies))+0.5) - 1
		return r.latencies[min(max(i, 0), len(r.latencies)-1)].Round(time.Millisecond)
	}
	lines := []string{
		fmt.Sprintf("CHAOS seed=%d messages=%d (canvas %d, peer %d of which %d posted twice by their sender)", r.seed, r.messages, r.canvas, r.peer, r.peerTwice),
		fmt.Sprintf("CHAOS kills: %d stage SIGKILLs, %d nats-server SIGKILL; faults: 429 %.1f%%, 500 %.1f%%, 500-after-work %.1f%%, +%s latency; handler time 0..%s",
			r.kills, r.natsKills, rate429*100, rate500*100, rate500After*100, faultLatency, 2**flagWork),
		fmt.Sprintf("CHAOS lost=%d duplicate_canvas_replies=%d duplicate_peer_messages_handled=%d misrouted=%d echo=%d dlq_not_permanent=%d (dlq total %d %v)",
			r.lost, r.dupCanvas, r.dupPeerHandled, r.misrouted, r.echo, r.dlqNotPermanent, r.dlqTotal, r.dlqReasons),
		fmt.Sprintf("CHAOS no-guarantee window: handler re-runs of one activity (dispatcher killed mid-handler) = %d; peer replies posted more than once by this relay after a crash or a 5xx (one messageId, removed by a receiving relay) = %d",
			r.handlerReruns, r.peerRepliesPostedTwice),
		fmt.Sprintf("CHAOS latency send->reply: p50=%s p95=%s p99=%s max=%s", pct(0.50), pct(0.95), pct(0.99), pct(1)),
	}
	if len(r.lostSample) > 0 {
		lines = append(lines, fmt.Sprintf("CHAOS lost (first 10): %v", r.lostSample[:min(10, len(r.lostSample))]))
	}
	if len(r.dupSample) > 0 {
		lines = append(lines, fmt.Sprintf("CHAOS duplicate canvas (first 10): %v", r.dupSample[:min(10, len(r.dupSample))]))
	}
	if len(r.misroutedSample) > 0 {
		lines = append(lines, fmt.Sprintf("CHAOS misrouted (first 10): %v", r.misroutedSample[:min(10, len(r.misroutedSample))]))
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// chaosPlatform is the chaos runs' platform double: no rate limit, no
// request log, seeded faults; the agent's workspace and peerCount peers
// registered in poll mode.
func chaosPlatform(t *testing.T, seed uint64) (*moleculetest.Server, moleculetest.Workspace, []moleculetest.Workspace) {
	t.Helper()
	plat := moleculetest.NewServer(moleculetest.WithRateLimit(0, 0), moleculetest.WithoutRequestLog(), moleculetest.WithSeed(seed))
	t.Cleanup(plat.Close)
	agent := plat.CreateWorkspace("chaos-agent")
	peers := make([]moleculetest.Workspace, peerCount)
	for i := range peers {
		peers[i] = plat.CreateWorkspace(fmt.Sprintf("chaos-peer-%d", i))
		registerPoll(t, plat, peers[i])
	}
	return plat, agent, peers
}
