package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/chaos"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/lazyfs"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var (
	flagCuts      = flag.Int("chaos.cuts", 0, "power cuts of the power-loss test (make chaos-powerloss); 0 skips it")
	flagSync      = flag.String("chaos.sync", "", "the store's sync: NATS_SYNC_INTERVAL of the relay's embedded server, or sync_interval of nats-server with -chaos.powerloss-nats (always, or a duration); empty: the relay's default, or nats-server's (2m)")
	flagPowerNATS = flag.Bool("chaos.powerloss-nats", false, "the power-loss test on a nats-server process (store on the lazyfs mount) with a connect and a dispatch process, instead of connect's embedded server")
)

// TestChaosPowerLoss cuts the power under traffic: the store (the embedded
// server's of a `connect` process, or a nats-server process's) is on a
// lazyfs mount; -chaos.cuts times, at a random point of its slot of the
// traffic, every process is SIGKILLed, every write not fsynced is dropped
// (lazyfs.Cut) and everything starts again. Then every message must have
// been answered once: the counts of chaos_test.go's check.
func TestChaosPowerLoss(t *testing.T) {
	if *flagCuts <= 0 {
		t.Skip("power-loss test: run make chaos-powerloss (-chaos.cuts=N)")
	}
	if err := lazyfs.Unavailable(); err != nil {
		t.Skipf("power-loss test skipped, this machine offers no FUSE: %v", err)
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	dir := t.TempDir()
	relayBin := buildRelay(t, dir)
	disk := mountLazyFS(t, dir)

	plat, agent, peers := chaosPlatform(t, seed)
	hs := newHandlerServer(t)

	sys := startPowered(t, dir, disk.Dir(), relayBin, plat.URL(), agent, hs.url)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range sys.all() {
				t.Logf("--- tail of %s ---\n%s", p.Name, p.Tail(3000))
			}
		}
	})
	js, topo := lookupTopology(t, sys.natsURL)
	waitSeeded(t, plat, topo, agent.ID)
	injectFaults(plat, agent)

	trafficFor := time.Duration(float64(*flagMsgs) / *flagRate * float64(time.Second))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var cuts cutCounts
	cutsDone := make(chan struct{})
	go func() {
		defer close(cutsDone)
		cutPower(ctx, t, rand.New(rand.NewPCG(seed+1, seed)), disk, sys, trafficFor, &cuts)
	}()
	start := time.Now()
	ledger := sendTraffic(t, plat, agent, peers, rng, *flagMsgs, *flagRate)
	<-cutsDone
	stop()
	sys.startAll(t)
	t.Logf("traffic: %d messages in %s, %d power cuts", len(ledger), time.Since(start).Round(time.Millisecond), cuts.cuts.Load())

	waitAnswered(t, plat, agent, peers, ledger, *flagDrain)
	waitQueuesEmpty(t, topo, 90*time.Second)
	res := check(t, plat, agent, peers, ledger, hs, js)
	res.seed, res.kills = seed, cuts.kills.Load()
	res.report(t)
	fmt.Printf("CHAOS power: store %s, sync %q: %d cuts (%d SIGKILLs), %d unsynced files and %d unsynced bytes dropped, %d restarts after a process exited by itself, %d streams not loaded after a cut (metadata lost)\n",
		sys.kind, *flagSync, cuts.cuts.Load(), cuts.kills.Load(), cuts.files.Load(), cuts.bytes.Load(), sys.selfExits(), unloadedStreams(sys.all()))
	fmt.Printf("CHAOS power: rolled back (part: cuts): %s\n", cuts.String())
}

// cutCounts are what the cuts dropped.
type cutCounts struct {
	cuts, kills, files, bytes atomic.Int64

	mu         sync.Mutex
	rolledBack map[string]int // store part (a stream, a consumer's state) -> cuts that rolled it back
}

func (c *cutCounts) add(rep lazyfs.CutReport) {
	c.cuts.Add(1)
	c.files.Add(int64(rep.Files))
	c.bytes.Add(rep.Bytes)
	parts := map[string]bool{}
	for _, p := range rep.Paths {
		parts[storePart(p)] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rolledBack == nil {
		c.rolledBack = map[string]int{}
	}
	for part := range parts {
		c.rolledBack[part]++
	}
}

// storePart names what a store file holds: its stream, then "meta" (the
// stream's metadata), "obs" (its consumers' state), "blk" (its messages)
// or the file's name (index.db: the stream's state, rebuilt from the
// blocks when it does not match).
func storePart(path string) string {
	if path == "" {
		return "(unlinked files)"
	}
	dirs := strings.Split(path, "/")
	i := slices.Index(dirs, "streams")
	if i < 0 || i+2 >= len(dirs) {
		return path
	}
	base := dirs[len(dirs)-1]
	kind := base
	switch {
	case dirs[i+2] == "obs":
		kind = "obs"
	case i+2 == len(dirs)-1:
		kind = "meta"
	case strings.HasSuffix(base, ".blk"):
		kind = "blk"
	}
	return dirs[i+1] + "/" + kind
}

func (c *cutCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	parts := slices.Sorted(maps.Keys(c.rolledBack))
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, " %s:%d", p, c.rolledBack[p])
	}
	return strings.TrimSpace(b.String())
}

// unloadedStreams counts the server's warnings, in every process's log,
// that a stream's metadata did not survive and the stream was not loaded.
func unloadedStreams(procs []*chaos.Process) int {
	n := 0
	for _, p := range procs {
		log := p.Tail(64 << 20)
		n += strings.Count(log, "checksums do not match") + strings.Count(log, "Missing stream metafile") + strings.Count(log, "Error reading metafile")
	}
	return n
}

// mountLazyFS mounts a lazyfs of dir/backing on dir/store, unmounted at
// cleanup (after the processes on it are stopped).
func mountLazyFS(t *testing.T, dir string) *lazyfs.FS {
	t.Helper()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "store")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	disk, err := lazyfs.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := disk.Unmount(); err != nil {
			t.Errorf("unmount lazyfs: %v", err)
		}
	})
	return disk
}

// powered is what a power cut stops: the relay's processes, and the
// nats-server process when the store is its.
type powered struct {
	kind    string // "embedded" or "nats-server"
	natsURL string
	ns      *chaos.NATS // nil: the relay's embedded server
	relay   []*chaos.Process
	// power is held by a cut, so that the supervisor restarts nothing
	// between the kills and the dropping of the unsynced writes.
	power sync.Mutex
}

func (p *powered) all() []*chaos.Process {
	if p.ns == nil {
		return p.relay
	}
	return append([]*chaos.Process{p.ns.Process}, p.relay...)
}

// startPowered starts either a connect process with its embedded server's
// store on mnt, or (-chaos.powerloss-nats) a nats-server storing on mnt
// and a connect and a dispatch process. Logs stay in dir, off the mount.
func startPowered(t *testing.T, dir, mnt, bin, platURL string, agent moleculetest.Workspace, handlerURL string) *powered {
	t.Helper()
	port := freeLoopbackPort(t)
	p := &powered{kind: "embedded", natsURL: "nats://127.0.0.1:" + strconv.Itoa(port)}
	env := stageEnv("", platURL, agent, handlerURL)
	env = append(env, "MOLECULE_LOG_LEVEL=warn", "NATS_STORE_DIR="+filepath.Join(mnt, "nats"), "NATS_EMBEDDED_PORT="+strconv.Itoa(port))
	if *flagSync != "" {
		env = append(env, "NATS_SYNC_INTERVAL="+*flagSync)
	}
	if *flagPowerNATS {
		p.kind = "nats-server"
		p.ns = startNATSOn(t, dir, mnt, port)
		// MOLECULE_TOPOLOGY as shipped (ensure): a stream whose
		// metadata a cut lost is created again, where a lookup-only
		// relay could not start at all.
		env = append(stageEnv(p.natsURL, platURL, agent, handlerURL), "MOLECULE_LOG_LEVEL=warn")
	}
	p.relay = append(p.relay, chaos.NewProcess("connect", bin, []string{"connect"}, env, filepath.Join(dir, "connect.log")))
	if *flagPowerNATS {
		p.relay = append(p.relay, chaos.NewProcess("dispatch-2", bin, []string{"dispatch"}, env, filepath.Join(dir, "dispatch-2.log")))
	}
	for _, r := range p.relay {
		t.Cleanup(r.Stop)
	}
	p.startAll(t)
	return p
}

// startNATSOn starts a nats-server on port with its JetStream store on
// mnt and sync_interval -chaos.sync (unset: the server's default).
func startNATSOn(t *testing.T, dir, mnt string, port int) *chaos.NATS {
	t.Helper()
	bin := clustertest.ServerBinary(t)
	t.Cleanup(clustertest.RemoveBinaries)
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n", port, filepath.Join(mnt, "jetstream"))
	if *flagSync != "" {
		conf += fmt.Sprintf("  sync_interval: %s\n", *flagSync)
	}
	conf += "}\n"
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	ns := &chaos.NATS{Process: chaos.NewProcess("nats-server", bin, []string{"-c", path}, env, filepath.Join(dir, "nats-server.log")), Port: port}
	t.Cleanup(ns.Stop)
	if err := ns.StartReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return ns
}

// startAll starts whatever is down: nats-server first.
func (p *powered) startAll(t *testing.T) {
	t.Helper()
	if p.ns != nil {
		if err := p.ns.StartReady(30 * time.Second); err != nil {
			t.Errorf("nats-server after the cut: %v", err)
		}
	}
	for _, r := range p.relay {
		if err := r.Start(); err != nil {
			t.Errorf("start %s: %v", r.Name, err)
		}
	}
}

func (p *powered) selfExits() int64 {
	var n int64
	for _, r := range p.all() {
		k, _ := r.SelfExits()
		n += k
	}
	return n
}

// cutPower cuts the power -chaos.cuts times, once at a random point of
// each of as many equal slots of the traffic: SIGKILL everything on the
// store, drop what was not fsynced, start again. Between cuts it
// restarts a relay process that exited by itself, as a supervisor would.
func cutPower(ctx context.Context, t *testing.T, rng *rand.Rand, disk *lazyfs.FS, sys *powered, trafficFor time.Duration, counts *cutCounts) {
	start := time.Now()
	slot := trafficFor / time.Duration(*flagCuts)
	go sys.supervise(ctx, t)
	for i := range *flagCuts {
		at := time.Duration(i)*slot + time.Duration(rng.Int64N(int64(slot)))
		if !pause(ctx, time.Until(start.Add(at))) {
			return
		}
		sys.power.Lock()
		for _, p := range sys.all() {
			if p.Kill() {
				counts.kills.Add(1)
			}
		}
		rep, err := disk.Cut()
		if err != nil {
			t.Errorf("cut: %v", err)
		}
		counts.add(rep)
		t.Logf("chaos %6.1fs: power cut: every process SIGKILLed, %d files lost %d unsynced bytes", time.Since(start).Seconds(), rep.Files, rep.Bytes)
		sys.startAll(t)
		sys.power.Unlock()
	}
}

// supervise restarts, every second, a relay process that exited by
// itself (for example one that found the store unreadable at start-up).
func (p *powered) supervise(ctx context.Context, t *testing.T) {
	for pause(ctx, time.Second) {
		p.power.Lock()
		for _, r := range p.relay {
			if !r.Running() {
				if err := r.Start(); err != nil {
					t.Errorf("restart %s: %v", r.Name, err)
				}
			}
		}
		p.power.Unlock()
	}
}

// lookupTopology connects to the relay's server once it listens and
// returns the topology once the relay has created it.
func lookupTopology(t *testing.T, url string) (jetstream.JetStream, *events.Topology) {
	t.Helper()
	addr := strings.TrimPrefix(url, "nats://")
	eventually(t, 60*time.Second, "the relay's NATS server to listen", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	js := connect(t, url)
	var topo *events.Topology
	eventually(t, 60*time.Second, "the relay's topology", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		topo, err = events.LookupTopology(ctx, js, events.TopologyConfig{})
		return err == nil
	})
	return js, topo
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
