package bench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// childEnv carries a relayConfig (JSON) to the re-executed test binary,
// which then runs TestRelayChild as the relay process.
const childEnv = "BENCH_RELAY_CHILD"

// childPrefix marks the child's answers on its stdout (the testing
// package may print there too).
const childPrefix = "relay-child: "

// relayConfig is the relay process's configuration: the stages of one
// scenario, against the platform double at PlatformURL.
type relayConfig struct {
	PlatformURL, AgentID, AgentToken string
	Handler                          string // "echo" or "sleep100ms"
	Dispatchers                      int    // dispatcher instances, each with its own NATS connection
	ChildProc                        bool   // the second dispatcher is a `molecule-relay dispatch` process
	Concurrency, ReplyConc           int
	SSE                              bool
	PollEvery, Overlap               time.Duration
	PooledHTTP                       bool
	HistoryTurns                     int    // MOLECULE_HISTORY_TURNS of every stage; 0: memory off
	Direct                           bool   // the in-process dispatchers post through the replier (MOLECULE_DIRECT_POST)
	StoreSync                        string // the NATS server's sync (NATS_SYNC_INTERVAL: always or a duration); "": the shipped default (always)
}

// relayStats is the child's answer to "stats".
type relayStats struct {
	CPU       time.Duration // utime+stime of the relay process (NATS included) and its child dispatcher
	InMsgs    int64         // the NATS server's messages received from clients
	OutMsgs   int64         // and sent to clients
	Replied   uint64        // replies the replier delivered (notify, A2A, reconciled)
	Handled   []uint64      // per in-process dispatcher
	Allocs    uint64        // heap objects allocated by the relay process (runtime/metrics)
	Written   int64         // bytes the relay process dirtied in files (fileWrites): NATS's stores
	Warnings  int
	FirstWarn []string
}

// TestRelayChild is the relay process of the benchmark: not a test. The
// benchmark re-executes its own binary with BENCH_RELAY_CHILD set, so the
// relay's CPU time (its stages and the embedded NATS server) is measured
// apart from the platform double and the senders. It answers commands on
// stdin until stdin closes.
func TestRelayChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the benchmark's relay process; runs only when the benchmark starts it")
	}
	var cfg relayConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", childEnv, err)
	}
	r := startRelay(t, cfg)
	r.serve(t, os.Stdin, os.Stdout)
}

// relay is the running relay inside the child process.
type relay struct {
	ns    *natstest.Server
	disp  []*dispatcher.Dispatcher
	rep   *replier.Replier
	warns *warnLog
	child int // pid of the `molecule-relay dispatch` process, 0 if none
	prof  *os.File
	base  string // path prefix of the window's profiles
}

var sleepHandler = handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "echo: " + req.Message.Text, nil
})

// startRelay brings the stages up and returns once every dispatcher holds
// a pull open and the poller seeded its cursor.
func startRelay(t *testing.T, cfg relayConfig) *relay {
	ns := natstest.StartEdited(t, func(o *server.Options) {
		bc := broker.Config{SyncInterval: cfg.StoreSync}
		if bc.SyncInterval == "" {
			bc.SyncInterval = broker.DefaultSyncInterval
		}
		always, interval, err := bc.StoreSync()
		if err != nil {
			t.Fatal(err)
		}
		o.SyncAlways, o.SyncInterval = always, interval
	})
	r := &relay{ns: ns, warns: &warnLog{}}
	log := slog.New(slog.NewTextHandler(r.warns, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	var stages sync.WaitGroup
	t.Cleanup(func() { cancel(); stages.Wait() })
	h := handler.Echo
	if cfg.Handler == "sleep100ms" {
		h = sleepHandler
	}
	// One NATS connection and one platform client per stage, as separate
	// processes would have.
	conn := func() (jetstream.JetStream, *events.Topology) {
		_, js := natstest.Connect(t, ns.ClientURL())
		topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return js, topo
	}
	client := func() *molecule.Client {
		c, err := molecule.New(molecule.Config{PlatformURL: cfg.PlatformURL, WorkspaceID: cfg.AgentID, Token: cfg.AgentToken,
			Logger: log, HTTPClient: httpClient(cfg.PooledHTTP)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	run := func(name string, f func(context.Context) error) {
		stages.Add(1)
		go func() {
			defer stages.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				log.Error("stage stopped", "stage", name, "error", err)
			}
		}()
	}

	jsR, topoR := conn()
	rep, err := replier.New(jsR, topoR, map[string]*molecule.Client{cfg.AgentID: client()},
		replier.Config{Config: stage.Config{Concurrency: cfg.ReplyConc, Logger: log}, Memory: stageMemory(t, jsR, topoR, cfg.HistoryTurns)})
	if err != nil {
		t.Fatal(err)
	}
	r.rep = rep
	run("replier", rep.Run)
	inproc := cfg.Dispatchers
	if cfg.ChildProc {
		inproc--
		r.child = startChild(t, ns.ClientURL(), cfg.Concurrency, cfg.HistoryTurns)
	}
	// Wired as relay.Runtime wires a dispatcher with its process's
	// replier; the `molecule-relay dispatch` child has none.
	var direct stage.ReplyDelivery
	if cfg.Direct {
		direct = rep
	}
	for range inproc {
		js, topo := conn()
		d, err := dispatcher.New(js, topo, h, dispatcher.Config{Config: stage.Config{Concurrency: cfg.Concurrency, Logger: log, Direct: direct},
			Memory: stageMemory(t, js, topo, cfg.HistoryTurns)})
		if err != nil {
			t.Fatal(err)
		}
		r.disp = append(r.disp, d)
		run("dispatcher", d.Run)
	}
	jsP, topoP := conn()
	pl, err := poller.New(jsP, topoP, poller.Config{
		Workspaces: []*molecule.Client{client()}, PollInterval: cfg.PollEvery, PageLimit: poller.MaxPageLimit,
		SSE: cfg.SSE, AgentName: "bench", Logger: log, OverlapEvery: cfg.Overlap, OverlapWindow: 4 * cfg.Overlap,
	})
	if err != nil {
		t.Fatal(err)
	}
	run("poller", pl.Run)

	waitFor(t, "dispatchers pulling", 30*time.Second, func() bool {
		info, err := topoR.Dispatcher.Info(ctx)
		return err == nil && info.NumWaiting >= cfg.Dispatchers
	})
	// The poller seeds its cursor on its first cycle, after registering; a
	// row queued before the seed would be taken as backlog and not
	// delivered (BacklogWindow 0), so wait for the cursor.
	waitFor(t, "cursor seeded", 30*time.Second, func() bool {
		_, err := topoR.Cursors.Get(ctx, cfg.AgentID)
		return err == nil
	})
	return r
}

// serve answers one line per command: "ready" at the start, then "stats",
// "replied" (the reply count alone), "profile <path prefix>" (start CPU
// profiling of a window and write the allocation profile at its start)
// and "stop" (end it, write the allocation profile at its end).
func (r *relay) serve(t *testing.T, in *os.File, out *os.File) {
	w := bufio.NewWriter(out)
	answer := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "%s%s\n", childPrefix, b)
		w.Flush()
	}
	answer("ready")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "stats":
			answer(r.stats())
		case "replied":
			answer(r.replied())
		case "profile":
			answer(r.startProfile(arg))
		case "stop":
			answer(r.stopProfile())
		default:
			answer(fmt.Sprintf("unknown command %q", cmd))
		}
	}
	if r.warns.count() > 0 {
		t.Logf("stage warnings: %d, first: %q", r.warns.count(), r.warns.first)
	}
}

// replied is the replies the replier delivered: all the wait loop needs,
// asked every 5 ms during a measured window, so it reads nothing else.
func (r *relay) replied() uint64 {
	rs := r.rep.Stats()
	return rs.Notified + rs.SentA2A + rs.Reconciled
}

func (r *relay) stats() relayStats {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	st := relayStats{CPU: time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) + procCPU(r.child)}
	if v, err := r.ns.Varz(nil); err == nil {
		st.InMsgs, st.OutMsgs = v.InMsgs, v.OutMsgs
	}
	sample := []rtmetrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	rtmetrics.Read(sample) // no stop-the-world, unlike runtime.ReadMemStats
	st.Allocs = sample[0].Value.Uint64()
	st.Written = fileWrites()
	st.Replied = r.replied()
	for _, d := range r.disp {
		st.Handled = append(st.Handled, d.Stats().Handled)
	}
	r.warns.mu.Lock()
	st.Warnings, st.FirstWarn = r.warns.n, append([]string(nil), r.warns.first...)
	r.warns.mu.Unlock()
	return st
}

func (r *relay) startProfile(base string) string {
	r.base = base
	if msg := r.writeAllocs(".allocs0.pprof"); msg != "ok" {
		return msg
	}
	f, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		return err.Error()
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err.Error()
	}
	r.prof = f
	return "ok"
}

func (r *relay) stopProfile() string {
	if r.prof == nil {
		return "no profile running"
	}
	pprof.StopCPUProfile()
	r.prof.Close()
	r.prof = nil
	return r.writeAllocs(".allocs1.pprof")
}

// writeAllocs writes the cumulative allocation profile; the window's
// allocations are allocs1 with allocs0 as its -base.
func (r *relay) writeAllocs(suffix string) string {
	f, err := os.Create(r.base + suffix)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	runtime.GC() // the profile is as of the last GC
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return err.Error()
	}
	return "ok"
}
