// Package pipelinetest builds the whole Molecule Relay pipeline for tests:
// an embedded NATS server with JetStream over TCP (internal/testkit/natstest), the
// platform double over real HTTP (moleculetest), an agent workspace with
// optional poll-mode peers, and the three stage cores (poller, dispatcher,
// replier), each on its own NATS connection as a separate process would be.
// It also records what the handler saw and checks the replies the platform
// received against what was sent, for the end-to-end guarantee tests.
//
// Nothing here is a mock: every stage is the real one, the only seams are
// the stages' own test hooks and what a test chooses to kill.
package pipelinetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// LogEnv names the environment variable that, when set to anything, sends
// every stage's debug log to standard error. If not set, logs are dropped.
const LogEnv = "PIPELINETEST_LOG"

// Options configure a World. The zero value is valid.
type Options struct {
	// Platform options of the double (generation, rate limit, late
	// commits...). If not set, a NEW platform with the default 600/min
	// limit.
	Platform []moleculetest.Option
	// Topology sizes the JetStream topology. Unset fields take short test
	// values where it matters (DispatcherAckWait and ReplierAckWait: 1
	// second, the minimum) and the events defaults otherwise. Storage is
	// file storage on the test's temporary directory, so a NATS restart
	// keeps the streams.
	Topology events.TopologyConfig
	// Peers is how many peer workspaces to create and register in poll
	// mode, so that replies to them are queued at once. If not set, none.
	Peers int
}

// World is one test's world: NATS, the platform double, the agent
// workspace and its peers. Create it with New.
type World struct {
	// T is the test the world belongs to.
	T testing.TB
	// Plat is the platform double.
	Plat *moleculetest.Server
	// Agent is the workspace the relay serves.
	Agent moleculetest.Workspace
	// Peers are poll-mode peer workspaces that send to the agent.
	Peers []moleculetest.Workspace
	// Topology is the topology configuration every process ensures.
	Topology events.TopologyConfig
	// Obs is an observer process: the test's own connection, for
	// assertions. It never runs a stage.
	Obs *Proc

	mu   sync.Mutex
	nats *natstest.Server
	sent map[string]Sent // by activity id; kept after the platform prunes rows
}

// New starts NATS and the platform double, creates the agent workspace
// and the peers (registered in poll mode). Everything stops at test
// cleanup.
func New(t testing.TB, opts Options) *World {
	t.Helper()
	tc := opts.Topology
	if tc.DispatcherAckWait == 0 {
		tc.DispatcherAckWait = time.Second
	}
	if tc.ReplierAckWait == 0 {
		tc.ReplierAckWait = time.Second
	}
	ns := natstest.Start(t)
	plat := moleculetest.NewServer(opts.Platform...)
	t.Cleanup(plat.Close)
	w := &World{T: t, Plat: plat, Topology: tc, nats: ns, sent: map[string]Sent{}}
	w.Agent = plat.CreateWorkspace("relay-agent")
	for i := range opts.Peers {
		p := plat.CreateWorkspace(fmt.Sprintf("peer-%d", i))
		w.Peers = append(w.Peers, p)
		if plat.Generation() >= moleculetest.Gen2026_05 {
			w.RegisterPoll(p)
		}
	}
	w.Obs = w.Proc()
	return w
}

// NATSURL is the NATS server's client URL (stable across Restart).
func (w *World) NATSURL() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nats.ClientURL()
}

// RestartNATS stops the NATS server and starts it again on the same store
// and port. Connections made by Proc reconnect by themselves.
func (w *World) RestartNATS() {
	w.T.Helper()
	w.mu.Lock()
	old := w.nats
	w.mu.Unlock()
	ns := old.Restart(w.T)
	w.mu.Lock()
	w.nats = ns
	w.mu.Unlock()
}

// Proc is one "process": its own NATS connection (reconnecting forever)
// and its own topology handles.
type Proc struct {
	NC   *nats.Conn
	JS   jetstream.JetStream
	Topo *events.Topology
}

// Proc opens a new process connection and ensures the topology on it. The
// connection is closed at test cleanup.
func (w *World) Proc() *Proc {
	w.T.Helper()
	return w.procAt(w.NATSURL())
}

// procAt is Proc on the NATS server at url.
func (w *World) procAt(url string) *Proc {
	w.T.Helper()
	nc, js := natstest.Connect(w.T, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topo, err := events.EnsureTopology(ctx, js, w.Topology)
	if err != nil {
		w.T.Fatalf("pipelinetest: EnsureTopology: %v", err)
	}
	return &Proc{NC: nc, JS: js, Topo: topo}
}

// Kill closes the process's NATS connection: every later publish, ack or
// key-value write of the process fails, as if it had died.
func (p *Proc) Kill() { p.NC.Close() }

// Logger returns the stages' logger: standard error at debug level when
// LogEnv is set, else a logger that drops everything.
func Logger() *slog.Logger {
	if os.Getenv(LogEnv) != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Client returns a platform client for ws with test-sized retries.
func (w *World) Client(ws moleculetest.Workspace) *molecule.Client {
	w.T.Helper()
	c, err := molecule.New(molecule.Config{
		PlatformURL:       w.Plat.URL(),
		WorkspaceID:       ws.ID,
		Token:             ws.Token,
		RetryBaseInterval: 10 * time.Millisecond,
		MaxBackoff:        2 * time.Second,
		Logger:            Logger(),
	})
	if err != nil {
		w.T.Fatalf("pipelinetest: client: %v", err)
	}
	return c
}

// RegisterPoll registers ws in poll mode outside any poller.
func (w *World) RegisterPoll(ws moleculetest.Workspace) {
	w.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Client(ws).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
		w.T.Fatalf("pipelinetest: register %s: %v", ws.Name, err)
	}
}

// NewPoller builds a poller on p. Unset fields: Workspaces is the agent
// alone, PollInterval 100 ms, HeartbeatInterval 1 s, Logger from Logger.
func (w *World) NewPoller(p *Proc, cfg poller.Config) *poller.Poller {
	w.T.Helper()
	if cfg.Workspaces == nil {
		cfg.Workspaces = []*molecule.Client{w.Client(w.Agent)}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	pl, err := poller.New(p.JS, p.Topo, cfg)
	if err != nil {
		w.T.Fatalf("pipelinetest: poller.New: %v", err)
	}
	return pl
}

// NewDispatcher builds a dispatcher on p around h. Unset fields: FetchWait
// 200 ms, RetryBase 50 ms, RetryMax 500 ms, StoreTimeout 10 s, Logger from
// Logger.
func (w *World) NewDispatcher(p *Proc, h handler.Handler, cfg dispatcher.Config) *dispatcher.Dispatcher {
	w.T.Helper()
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 200 * time.Millisecond
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 50 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 500 * time.Millisecond
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	d, err := dispatcher.New(p.JS, p.Topo, h, cfg)
	if err != nil {
		w.T.Fatalf("pipelinetest: dispatcher.New: %v", err)
	}
	return d
}

// NewReplier builds a replier on p. clients nil means the agent's own
// client alone. Unset fields: FetchWait 200 ms, RetryBase 50 ms, RetryMax
// 1 s, NotifyTimeout 2 s, A2ATimeout 5 s, StoreTimeout 10 s, Logger from
// Logger.
func (w *World) NewReplier(p *Proc, clients map[string]*molecule.Client, cfg replier.Config) *replier.Replier {
	w.T.Helper()
	if clients == nil {
		clients = map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}
	}
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 200 * time.Millisecond
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 50 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = time.Second
	}
	if cfg.NotifyTimeout == 0 {
		cfg.NotifyTimeout = 2 * time.Second
	}
	if cfg.A2ATimeout == 0 {
		cfg.A2ATimeout = 5 * time.Second
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	r, err := replier.New(p.JS, p.Topo, clients, cfg)
	if err != nil {
		w.T.Fatalf("pipelinetest: replier.New: %v", err)
	}
	return r
}

// Running is a stage's Run in the background.
type Running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	once   sync.Once
	t      testing.TB
}

// Start runs fn in a goroutine until Stop (called at test cleanup too).
func Start(t testing.TB, fn func(context.Context) error) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan struct{}), t: t}
	go func() {
		defer close(r.done)
		r.err = fn(ctx)
	}()
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// Done is closed when the run returned.
func (r *Running) Done() <-chan struct{} { return r.done }

// Err is the run's error; only valid after Done is closed.
func (r *Running) Err() error {
	<-r.done
	return r.err
}

// Cancel cancels the run without waiting for it to return.
func (r *Running) Cancel() { r.once.Do(r.cancel) }

// Stop cancels the run and returns its error, waiting at most 20 s.
func (r *Running) Stop() error {
	r.once.Do(r.cancel)
	select {
	case <-r.done:
		return r.err
	case <-time.After(20 * time.Second):
		r.t.Errorf("pipelinetest: a stage did not return within 20s of its cancel")
		return context.DeadlineExceeded
	}
}

// PipelineConfig configures StartPipeline. Zero stage configs take the
// defaults of NewPoller, NewDispatcher and NewReplier.
type PipelineConfig struct {
	Poller     poller.Config
	Dispatcher dispatcher.Config
	Replier    replier.Config
	// Handler is the dispatcher's handler. If nil, a new Recorder around
	// handler.Echo (returned in Pipeline.Recorder).
	Handler handler.Handler
	// ReplierClients are the replier's clients; nil: the poller's
	// workspaces' clients (shared, as relay.Runtime shares them).
	ReplierClients map[string]*molecule.Client
	// NoPoller, NoDispatcher and NoReplier leave that stage out (a test
	// runs it itself, for example with crash hooks).
	NoPoller, NoDispatcher, NoReplier bool
	// Direct puts the dispatcher and the replier in one process and has
	// the dispatcher post its replies through that replier
	// (stage.Config.Direct), as relay's composition does. It needs
	// both stages.
	Direct bool
}

// Pipeline is the three stages running long-running, each in its own
// process.
type Pipeline struct {
	Recorder   *Recorder
	Poller     *poller.Poller
	Dispatcher *dispatcher.Dispatcher
	Replier    *replier.Replier
	// PollerProc, DispatcherProc and ReplierProc are the stages' processes.
	PollerProc, DispatcherProc, ReplierProc *Proc
	// PollerRun, DispatcherRun and ReplierRun are the running Run calls.
	PollerRun, DispatcherRun, ReplierRun *Running
}

// StartPipeline starts the dispatcher, the replier and the poller (those
// not left out), each with Run on its own connection.
func (w *World) StartPipeline(cfg PipelineConfig) *Pipeline {
	w.T.Helper()
	pl := &Pipeline{}
	h := cfg.Handler
	if h == nil {
		pl.Recorder = NewRecorder(nil)
		h = pl.Recorder
	}
	if cfg.Poller.Workspaces == nil {
		cfg.Poller.Workspaces = []*molecule.Client{w.Client(w.Agent)}
	}
	clients := cfg.ReplierClients
	if clients == nil {
		clients = map[string]*molecule.Client{}
		for _, c := range cfg.Poller.Workspaces {
			clients[c.WorkspaceID()] = c
		}
	}
	if cfg.Direct && (cfg.NoDispatcher || cfg.NoReplier) {
		w.T.Fatal("pipelinetest: Direct needs the dispatcher and the replier")
	}
	if !cfg.NoReplier {
		pl.ReplierProc = w.Proc()
		pl.Replier = w.NewReplier(pl.ReplierProc, clients, cfg.Replier)
		pl.ReplierRun = Start(w.T, pl.Replier.Run)
	}
	if !cfg.NoDispatcher {
		pl.DispatcherProc = w.Proc()
		if cfg.Direct {
			pl.DispatcherProc, cfg.Dispatcher.Direct = pl.ReplierProc, pl.Replier
		}
		pl.Dispatcher = w.NewDispatcher(pl.DispatcherProc, h, cfg.Dispatcher)
		pl.DispatcherRun = Start(w.T, pl.Dispatcher.Run)
	}
	if !cfg.NoPoller {
		pl.PollerProc = w.Proc()
		pl.Poller = w.NewPoller(pl.PollerProc, cfg.Poller)
		pl.PollerRun = Start(w.T, pl.Poller.Run)
	}
	return pl
}

// Stop stops every running stage and reports any Run error.
func (pl *Pipeline) Stop(t testing.TB) {
	t.Helper()
	for _, r := range []*Running{pl.PollerRun, pl.DispatcherRun, pl.ReplierRun} {
		if r == nil {
			continue
		}
		if err := r.Stop(); err != nil {
			t.Errorf("pipelinetest: stage Run returned %v", err)
		}
	}
}

// Eventually polls cond every 10 ms until it holds, failing the test
// after within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-tick.C
	}
}

// Ctx is a context cancelled at test cleanup, without a deadline (a
// deadline would engage the stages' start-margin rules).
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// WaitSeeded waits until ws is registered in poll mode and its cursor key
// exists (a poller ran its first cycle), so that later messages are new.
func (w *World) WaitSeeded(ws string) {
	w.T.Helper()
	Eventually(w.T, 15*time.Second, "workspace registered and cursor seeded", func() bool {
		if w.Plat.Status(ws).DeliveryMode != "poll" {
			return false
		}
		_, err := w.Obs.Topo.Cursors.Get(Ctx(w.T), ws)
		return err == nil
	})
}

// StreamMsgs is the number of messages stored in s.
func (w *World) StreamMsgs(s jetstream.Stream) uint64 {
	w.T.Helper()
	info, err := s.Info(Ctx(w.T))
	if err != nil {
		w.T.Fatalf("pipelinetest: stream info: %v", err)
	}
	return info.State.Msgs
}

// Queued is what the inbound and reply streams still hold (work queues:
// unacknowledged or undelivered messages).
func (w *World) Queued() (inbound, reply uint64) {
	return w.StreamMsgs(w.Obs.Topo.Inbound), w.StreamMsgs(w.Obs.Topo.Reply)
}

// DeadLetters lists the dead-letter stream.
func (w *World) DeadLetters() []dlq.Entry {
	w.T.Helper()
	entries, err := dlq.List(Ctx(w.T), w.Obs.JS, dlq.Filter{})
	if err != nil {
		w.T.Fatalf("pipelinetest: dlq.List: %v", err)
	}
	return entries
}
