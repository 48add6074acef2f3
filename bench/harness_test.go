package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var (
	flagEchoMsgs   = flag.Int("echo-msgs", 10000, "messages per echo run")
	flagSleepMsgs  = flag.Int("sleep-msgs", 3000, "messages per sleep-100ms run")
	flagIdleMsgs   = flag.Int("idle-msgs", 30, "messages of the idle-latency run (one at a time)")
	flagIdleWindow = flag.Duration("idle-window", 10*time.Second, "the idle-latency run first measures the relay's CPU over this long without messages (idle_us/s); 0 skips it")
	flagStoreSync  = flag.String("store-sync", broker.DefaultSyncInterval, "the relay's NATS server fsyncs its store: always (the shipped default), or every duration (NATS_SYNC_INTERVAL; 2m is nats-server's own default)")
	flagSenders    = flag.Int("senders", 8, "concurrent HTTP senders injecting messages")
	flagPeerEvery  = flag.Int("peer-every", 4, "every n-th message comes from a peer agent (its reply goes out as A2A); 0: canvas only")
	flagProc       = flag.Bool("proc", true, "also run echo with the second dispatcher as a child `molecule-relay dispatch` process")
	flagTimeout    = flag.Duration("run-timeout", 2*time.Minute, "how long one run may wait for its replies")
	flagOverlap    = flag.Duration("overlap-every", 0, "the poller's OverlapEvery, with OverlapWindow 4x as long (the production ratio, 30s/2m); "+
		"0: the poller's defaults, whose first re-read after the start comes 30s later, after most runs ended")
	flagPooledHTTP = flag.Bool("pooled-http", true, "give the platform clients an HTTP transport that keeps 256 idle connections per host "+
		"(false: the default transport, 2 idle per host, as relay.Open builds them)")
	flagDirect = flag.Bool("direct", true, "the dispatchers in the relay process post their replies through its replier, skipping the reply stream, "+
		"as connect does by default (MOLECULE_DIRECT_POST); false: every reply goes through the reply stream")
)

// scenario is one pipeline configuration.
type scenario struct {
	handler     string // "echo" or "sleep100ms"
	dispatchers int    // dispatcher instances, each with its own NATS connection
	childProc   bool   // the second dispatcher is a child process (echo only)
	concurrency int    // per dispatcher
	replyConc   int
	sse         bool
	pollEvery   time.Duration
	// historyTurns is MOLECULE_HISTORY_TURNS of the relay's stages: the
	// shipped default (20) unless a case turns memory off (0).
	historyTurns int
	// conversations spreads the canvas messages over that many A2A
	// contexts, each its own conversation; 0: all in the canvas
	// conversation (a burst into one conversation).
	conversations int
}

// pipeline is the platform double and its senders, in this process, and
// the relay (NATS server and stages) in another one.
type pipeline struct {
	srv   *moleculetest.Server
	agent moleculetest.Workspace
	peers []moleculetest.Workspace
	relay *relayProc
	tb    testing.TB
	run   int // number of the current injection (message text prefix)
	// conversations: see scenario.
	conversations int
	runBase       uint64 // replies delivered before the current injection
	childProc     bool   // a dispatcher runs in a child process (its handled count is not in the stats)
}

// warnLog keeps the first warnings the stages logged, and counts them all.
type warnLog struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (w *warnLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if len(w.first) < 5 {
		w.first = append(w.first, strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *warnLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func httpClient(pooled bool) *http.Client {
	if !pooled {
		return nil // molecule.New's default, as relay.Open builds it
	}
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
}

// start brings the double and the relay process up and returns once the
// relay has answered one canvas and one peer message (so the SSE stream,
// pulls and connections are warm).
func start(b testing.TB, sc scenario) *pipeline {
	b.Helper()
	srv := moleculetest.NewServer(moleculetest.WithRateLimit(0, 0), moleculetest.WithoutRequestLog())
	b.Cleanup(srv.Close)
	p := &pipeline{srv: srv, tb: b}
	p.agent = srv.CreateWorkspace("bench-agent")
	ctx := context.Background()
	for i := range 2 {
		pw := srv.CreateWorkspace(fmt.Sprintf("bench-peer-%d", i))
		pc, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: pw.ID, Token: pw.Token})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pc.Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
			b.Fatalf("register peer: %v", err)
		}
		p.peers = append(p.peers, pw)
	}
	p.relay = startRelayProc(b, relayConfig{
		PlatformURL: srv.URL(), AgentID: p.agent.ID, AgentToken: p.agent.Token, Handler: sc.handler,
		Dispatchers: sc.dispatchers, ChildProc: sc.childProc, Concurrency: sc.concurrency, ReplyConc: sc.replyConc,
		SSE: sc.sse, PollEvery: sc.pollEvery, Overlap: *flagOverlap, PooledHTTP: *flagPooledHTTP,
		HistoryTurns: sc.historyTurns, Direct: *flagDirect, StoreSync: *flagStoreSync,
	})
	p.conversations, p.childProc = sc.conversations, sc.childProc
	if got := srv.Status(p.agent.ID).DeliveryMode; got != "poll" {
		b.Fatalf("relay ready but the workspace's delivery mode is %q", got)
	}
	if _, err := p.inject(ctx, 2, 1, 2); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	if res := p.collect(b, 2, 30*time.Second); res.missing > 0 {
		b.Fatalf("warm-up: %d of 2 replies missing", res.missing)
	}
	return p
}

// startChild runs `molecule-relay dispatch` (echo) against the same NATS
// and returns its pid.
func startChild(b testing.TB, natsURL string, concurrency, historyTurns int) int {
	b.Helper()
	bin := relayBinary(b)
	cmd := exec.Command(bin, "dispatch")
	cmd.Env = append(os.Environ(),
		"NATS_URL="+natsURL,
		"MOLECULE_HANDLER=echo",
		"MOLECULE_CONCURRENCY="+strconv.Itoa(concurrency),
		"MOLECULE_HISTORY_TURNS="+strconv.Itoa(historyTurns),
		"MOLECULE_LOG_LEVEL=warn",
		"MOLECULE_METRICS_ADDR=",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s dispatch: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if s := strings.TrimSpace(stderr.String()); s != "" {
			b.Logf("child dispatcher stderr: %.500s", s)
		}
	})
	return cmd.Process.Pid
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// relayBinary builds ./cmd/molecule-relay once per test binary.
func relayBinary(b testing.TB) string {
	b.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "molecule-relay-bench-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "molecule-relay")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/molecule-relay").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/molecule-relay: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binPath
}

// sent is one injected message.
type sent struct {
	text string
	peer int // -1: canvas user
}

// inject sends n messages numbered from first with the given number of
// concurrent senders; every peerEvery-th comes from a peer. It returns the
// time the first send started.
func (p *pipeline) inject(ctx context.Context, n, senders, peerEvery int) (time.Time, error) {
	p.run++
	var next atomic.Int64
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				m := p.message(i, peerEvery)
				var code int
				var body []byte
				var err error
				switch {
				case m.peer >= 0:
					code, body, err = p.srv.SendPeer(ctx, p.peers[m.peer], p.agent.ID, m.text)
				case p.conversations > 0:
					code, body, err = p.srv.SendRaw(ctx, p.agent.ID, p.srv.CanvasHeader(), canvasInContext(m.text, fmt.Sprint("c", i%p.conversations)))
				default:
					code, body, err = p.srv.SendCanvas(ctx, p.agent.ID, m.text)
				}
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("send %d: status %d: %.200s", i, code, body)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return start, <-errs
}

// canvasInContext is a canvas message carrying an A2A contextId, which
// makes it a conversation of its own (events.ConversationOf).
func canvasInContext(text, contextID string) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": "1", "method": "message/send",
		"params": map[string]any{
			"message": map[string]any{
				"role": "user", "messageId": fmt.Sprintf("m-%s", text), "contextId": contextID,
				"parts": []any{map[string]any{"kind": "text", "text": text}},
			},
			"metadata": map[string]any{"history": []any{}},
		},
	})
	return b
}

func (p *pipeline) message(i, peerEvery int) sent {
	m := sent{text: fmt.Sprintf("r%d-m%d", p.run, i), peer: -1}
	if peerEvery > 0 && i%peerEvery == peerEvery-1 {
		m.peer = (i / peerEvery) % len(p.peers)
	}
	return m
}

// result is what one run measured.
type result struct {
	got, missing, dups int
	lat                []time.Duration // per message: reply at the double − row created_at
	first, last        time.Time       // earliest created_at, latest reply
}

func (p *pipeline) replied() uint64 { return p.relay.replied(p.tb) }

// collect waits for the replies of the current run (wait), then matches
// them (match).
func (p *pipeline) collect(b testing.TB, want int, timeout time.Duration) result {
	b.Helper()
	p.wait(want, timeout)
	return p.match(want)
}

// wait waits until the replier has delivered want more replies than
// before this run, or timeout.
func (p *pipeline) wait(want int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for p.replied() < p.runBase+uint64(want) && time.Now().Before(deadline) {
		<-t.C
	}
}

// settled is the relay's stats once its dispatchers counted the run's n
// messages handled, or after 5 s: a directly posted reply reaches the
// platform before its dispatcher counts the message, acks it and writes
// its turns, so stats read the moment the last reply arrived would leave
// that work out. With a child dispatcher process, whose count the stats
// do not hold, they are read at once.
func (p *pipeline) settled(b testing.TB, st0 relayStats, n int) relayStats {
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := p.relay.stats(b)
		var handled uint64
		for i, h := range st.Handled {
			handled += h - st0.Handled[i]
		}
		if p.childProc || handled >= uint64(n) || time.Now().After(deadline) {
			return st
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// match matches the double's notify and A2A logs against the rows of the
// current run.
func (p *pipeline) match(want int) result {
	prefix := fmt.Sprintf("r%d-m", p.run)
	p.runBase = p.replied()

	created := make(map[string]time.Time, want)
	for _, raw := range p.srv.Rows(p.agent.ID) {
		m, err := molecule.ParseRow(json.RawMessage(raw), p.agent.ID)
		if err != nil || m.Method == "notify" || !strings.HasPrefix(m.Text, prefix) {
			continue
		}
		created[m.Text] = m.CreatedAt
	}
	replyAt := make(map[string]time.Time, want)
	res := result{}
	note := func(text string, at time.Time) {
		text, ok := strings.CutPrefix(text, "echo: ")
		if !ok || !strings.HasPrefix(text, prefix) {
			return
		}
		if _, seen := replyAt[text]; seen {
			res.dups++
			return
		}
		replyAt[text] = at
	}
	for _, n := range p.srv.Notifications(p.agent.ID) {
		note(n.Message, n.At)
	}
	for _, pw := range p.peers {
		for _, c := range p.srv.A2ACalls(pw.ID) {
			if c.CallerID == p.agent.ID {
				note(a2aText(c.Body), c.At)
			}
		}
	}
	for text, c := range created {
		at, ok := replyAt[text]
		if !ok {
			res.missing++
			continue
		}
		res.got++
		res.lat = append(res.lat, at.Sub(c))
		if res.first.IsZero() || c.Before(res.first) {
			res.first = c
		}
		if at.After(res.last) {
			res.last = at
		}
	}
	res.missing += want - len(created)
	slices.Sort(res.lat)
	return res
}

func a2aText(body json.RawMessage) string {
	var rpc struct {
		Params struct {
			Message struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &rpc) != nil {
		return ""
	}
	var sb strings.Builder
	for _, p := range rpc.Params.Message.Parts {
		sb.WriteString(p.Text)
	}
	return sb.String()
}

// pct is the q-quantile (nearest rank) of sorted durations, in ms.
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

func waitFor(b testing.TB, what string, within time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(within)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-t.C
	}
}

// loadavg returns the 1-minute load average (NaN if unknown).
func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// selfCPU is the user+system CPU time of this process: the platform
// double and the senders.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads a running process's user+system time from /proc/<pid>/stat
// (clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after ")" are fixed.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest) // f[0] is field 3 (state): utime is field 14
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// fileWrites is the bytes this process dirtied in files (the page cache
// counts whole pages), from /proc/self/io write_bytes: the embedded
// server's stores. 0 where the kernel does not keep the count.
func fileWrites() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
