package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var (
	flagFleet       = flag.String("fleet", "", "BenchmarkFleet: comma-separated fleet sizes (make bench-fleet: 100,1000); empty skips it")
	flagFleetWarmup = flag.Duration("fleet-warmup", 100*time.Second, "BenchmarkFleet: time between the last workspace's first heartbeat and the idle window "+
		"(long enough for the start's burst of connections to pass their 90 s idle timeout)")
	flagFleetIdle  = flag.Duration("fleet-idle", 2*time.Minute, "BenchmarkFleet: the measured idle window (at least the relay's safety-net interval)")
	flagFleetMsgs  = flag.Int("fleet-msgs", 200, "BenchmarkFleet: messages sent to random workspaces after the idle window, for the answer latency")
	flagFleetTLS   = flag.Bool("fleet-tls", false, "BenchmarkFleet: the double serves HTTPS with HTTP/2, as a platform behind TLS does (the relay's streams then share a few connections)")
	flagFleetRelay = flag.String("fleet-relay", "", "BenchmarkFleet: the molecule-relay binary to measure; empty builds ../cmd/molecule-relay")
	flagFleetLog   = flag.String("fleet-log", "", "BenchmarkFleet: write every platform request of the run to this file (seconds since start, method, path, query, status), to see one workspace's cadence")
)

// BenchmarkFleet measures what an idle fleet costs: one `molecule-relay
// connect` process (the shipped binary, its defaults, embedded NATS) for n
// workspaces, each with its own token and event stream, against the
// platform double in this process. After a warm-up it measures an idle
// window: the relay's RSS, its CPU (utime+stime over the window, % of one
// core), the platform requests per workspace per minute by kind, the TCP
// connections the double accepted and the sockets in TIME_WAIT on the
// double's port; then the latency of -fleet-msgs canvas messages sent to
// random workspaces (sent to the double's notify). Not part of CI: it runs
// for a few minutes (make bench-fleet).
func BenchmarkFleet(b *testing.B) {
	if *flagFleet == "" {
		b.Skip("fleet benchmark: run with -fleet 100,1000 (make bench-fleet)")
	}
	bin := *flagFleetRelay
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "molecule-relay")
		out, err := exec.Command("go", "build", "-o", bin, "../cmd/molecule-relay").CombinedOutput()
		if err != nil {
			b.Fatalf("build molecule-relay: %v\n%s", err, out)
		}
	}
	var all []fleetFigures
	defer func() { printFleetTable(all) }()
	for _, s := range strings.Split(*flagFleet, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("-fleet: %q is not a fleet size", s)
		}
		b.Run(fmt.Sprintf("ws=%d", n), func(b *testing.B) {
			for range b.N {
				all = append(all, runFleet(b, bin, n))
			}
		})
	}
}

// fleetFigures is one fleet run's result.
type fleetFigures struct {
	n                                   int
	rssMB, fileMB, heapMB, stackMB      float64
	cpuPct                              float64
	goroutines                          int
	reqPerWsMin                         float64
	byKind                              map[string]float64 // requests per workspace per minute
	accepted, timeWait, sockets         int
	sent, answered, duplicated, missing int
	p50, p99, max                       time.Duration
}

func runFleet(b *testing.B, bin string, n int) fleetFigures {
	opts := []moleculetest.Option{moleculetest.WithRequestLogLimit(0)}
	if *flagFleetTLS {
		opts = append(opts, moleculetest.WithTLS())
	}
	srv := moleculetest.NewServer(opts...)
	defer srv.Close()
	wss := make([]moleculetest.Workspace, n)
	entries := make([]map[string]string, n)
	for i := range wss {
		wss[i] = srv.CreateWorkspace(fmt.Sprintf("fleet-%d", i))
		entries[i] = map[string]string{"id": wss[i].ID, "token": wss[i].Token}
	}
	metricsAddr := freeAddr(b)
	cmd := exec.Command(bin, "connect")
	cmd.Dir = b.TempDir()
	// A file: 10,000 ids and tokens do not fit in a variable (MAX_ARG_STRLEN).
	wsFile := filepath.Join(cmd.Dir, "workspaces.json")
	raw, err := json.Marshal(entries)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(wsFile, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd.Env = append(withoutMolecule(os.Environ()),
		"MOLECULE_PLATFORM_URL="+srv.URL(),
		"MOLECULE_WORKSPACES_FILE="+wsFile,
		"MOLECULE_HANDLER=echo",
		"MOLECULE_LOG_LEVEL=warn",
		"MOLECULE_METRICS_ADDR="+metricsAddr,
		"NATS_STORE_DIR="+filepath.Join(cmd.Dir, "nats"),
	)
	if pemCert := srv.CertPEM(); pemCert != nil {
		certFile := filepath.Join(cmd.Dir, "double.pem")
		if err := os.WriteFile(certFile, pemCert, 0o600); err != nil {
			b.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+certFile)
	}
	if a := os.Getenv("FLEET_PPROF_ADDR"); a != "" { // a relay built with net/http/pprof on PPROF_ADDR
		cmd.Env = append(cmd.Env, "PPROF_ADDR="+a)
	}
	var stderr capped
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	// Ready: every workspace holds its event stream and heartbeats.
	start := time.Now()
	for {
		streams, beats := map[string]bool{}, map[string]bool{}
		for _, r := range srv.Requests() {
			switch {
			case strings.HasSuffix(r.Path, "/events/stream") && r.Status == http.StatusOK:
				streams[strings.Split(strings.TrimPrefix(r.Path, "/workspaces/"), "/")[0]] = true
			case r.Path == "/registry/heartbeat" && r.Status == http.StatusOK:
				beats[bodyWorkspace(r.Body)] = true
			}
		}
		if len(streams) >= n && len(beats) >= n {
			break
		}
		if time.Since(start) > 10*time.Minute { // 10,000 start in 2-5 minutes on a shared 2-core machine
			b.Fatalf("fleet of %d not ready after 10 min: %d streams, %d heartbeating; relay stderr: %.2000s", n, len(streams), len(beats), stderr.String())
		}
		time.Sleep(time.Second)
	}
	ready := time.Since(start)
	time.Sleep(*flagFleetWarmup)

	// The idle window.
	pid := cmd.Process.Pid
	cpu0, acc0, t0 := procCPU(pid), srv.Accepted(), time.Now()
	time.Sleep(*flagFleetIdle)
	cpu1, acc1, t1 := procCPU(pid), srv.Accepted(), time.Now()
	f := fleetFigures{n: n, byKind: map[string]float64{}}
	win := t1.Sub(t0)
	f.cpuPct = 100 * float64(cpu1-cpu0) / float64(win)
	rss, file := procRSS(b, pid)
	f.rssMB, f.fileMB = float64(rss)/(1<<20), float64(file)/(1<<20)
	f.accepted = int(acc1 - acc0)
	f.timeWait = timeWait(b, srv.URL())
	f.sockets = procSockets(pid)
	gor, heap, stack := scrapeGo(metricsAddr)
	f.goroutines, f.heapMB, f.stackMB = gor, heap/(1<<20), stack/(1<<20)
	perWsMin := 1 / (float64(n) * win.Minutes())
	for _, r := range srv.Requests() {
		if r.At.Before(t0) || r.At.After(t1) {
			continue
		}
		f.byKind[requestKind(r)] += perWsMin
		f.reqPerWsMin += perWsMin
	}

	// Answer latency: messages to random workspaces, a few at a time.
	rng := rand.New(rand.NewPCG(uint64(n), 27))
	sentAt := make(map[string]time.Time, *flagFleetMsgs)
	target := make(map[string]string, *flagFleetMsgs)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range *flagFleetMsgs {
		ws := wss[rng.IntN(n)]
		text := fmt.Sprintf("fleet-%d-%d", n, i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			at := time.Now()
			if code, body, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code != http.StatusOK {
				b.Errorf("send to %s: %d %s %v", ws.ID, code, body, err)
				return
			}
			mu.Lock()
			sentAt[text], target[text] = at, ws.ID
			mu.Unlock()
		}()
		time.Sleep(50 * time.Millisecond) // 20 messages a second, spread over the fleet
	}
	wg.Wait()
	f.sent = len(sentAt)
	deadline := time.Now().Add(60 * time.Second)
	var lat []time.Duration
	for {
		lat, f.duplicated, f.missing = answers(srv, sentAt, target)
		if f.missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	f.answered = len(lat)
	if *flagFleetLog != "" {
		writeRequestLog(b, srv, start, *flagFleetLog)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		f.p50, f.p99, f.max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	kinds := make([]string, 0, len(f.byKind))
	for k := range f.byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, f.byKind[k]))
	}
	proto := "http/1.1"
	if *flagFleetTLS {
		proto = "https+h2"
	}
	fmt.Printf("fleet ws=%d %s ready=%s idle=%s: rss %.0f MB (%.0f MB of it the executable's pages; heap %.0f MB, stacks %.0f MB, %d goroutines), cpu %.2f%% of a core, %.2f requests/ws/min (%s), "+
		"%d new connections, %d TIME_WAIT; answered %d/%d (duplicated %d, missing %d) p50 %s p99 %s max %s; load %s\n",
		n, proto, ready.Round(time.Second), win.Round(time.Second), f.rssMB, f.fileMB, f.heapMB, f.stackMB, f.goroutines, f.cpuPct, f.reqPerWsMin, strings.Join(parts, ", "),
		f.accepted, f.timeWait, f.answered, f.sent, f.duplicated, f.missing,
		f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), f.max.Round(time.Millisecond), loadAvg())
	b.ReportMetric(f.rssMB, "rss_MB")
	b.ReportMetric(f.cpuPct, "idle_cpu_%")
	b.ReportMetric(f.reqPerWsMin, "req/ws/min")
	b.ReportMetric(float64(f.accepted), "new_conns")
	b.ReportMetric(float64(f.timeWait), "time_wait")
	b.ReportMetric(float64(f.p50.Milliseconds()), "p50_ms")
	b.ReportMetric(float64(f.p99.Milliseconds()), "p99_ms")
	if f.missing > 0 || f.duplicated > 0 {
		b.Errorf("fleet of %d: %d messages unanswered, %d answered twice", n, f.missing, f.duplicated)
	}
	return f
}

// printFleetTable prints the sizes side by side, per workspace first: the
// cost should grow linearly (issue 42: at 10,000, RSS ≤ 500 MB, idle CPU
// ≤ 10 % of a core, ≤ 3 requests per workspace a minute, p99 ≤ 250 ms).
func printFleetTable(all []fleetFigures) {
	if len(all) == 0 {
		return
	}
	row := func(name string, cell func(f fleetFigures) string) {
		fmt.Printf("| %s |", name)
		for _, f := range all {
			fmt.Printf(" %s |", cell(f))
		}
		fmt.Println()
	}
	fmt.Println()
	row("idle fleet", func(f fleetFigures) string { return fmt.Sprintf("%d workspaces", f.n) })
	row("---", func(fleetFigures) string { return "---" })
	row("RSS per workspace", func(f fleetFigures) string { return fmt.Sprintf("%.0f KB", f.rssMB*1024/float64(f.n)) })
	row("CPU per workspace, ms a minute", func(f fleetFigures) string { return fmt.Sprintf("%.2f", f.cpuPct*600/float64(f.n)) })
	row("platform requests per workspace a minute", func(f fleetFigures) string { return fmt.Sprintf("%.2f", f.reqPerWsMin) })
	row("sockets per workspace", func(f fleetFigures) string { return fmt.Sprintf("%.2f", float64(f.sockets)/float64(f.n)) })
	row("RSS (≤ 500 MB at 10,000)", func(f fleetFigures) string {
		return fmt.Sprintf("%.0f MB (heap %.0f, stacks %.0f)", f.rssMB, f.heapMB, f.stackMB)
	})
	row("goroutines", func(f fleetFigures) string { return strconv.Itoa(f.goroutines) })
	row("idle CPU, % of a core (≤ 10 %)", func(f fleetFigures) string { return fmt.Sprintf("%.2f %%", f.cpuPct) })
	row("new connections / TIME_WAIT in the window", func(f fleetFigures) string { return fmt.Sprintf("%d / %d", f.accepted, f.timeWait) })
	row("answered once", func(f fleetFigures) string { return fmt.Sprintf("%d/%d", f.answered-f.duplicated, f.sent) })
	row("answer p50 / p99 / max (p99 ≤ 250 ms)", func(f fleetFigures) string {
		return fmt.Sprintf("%s / %s / %s", f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), f.max.Round(time.Millisecond))
	})
}

// procSockets counts the process's open sockets (its event streams, the
// pool's connections, NATS).
func procSockets(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(dir)
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// answers matches the double's notifies to the messages sent: the echo
// handler answers "echo: <text>".
func answers(srv *moleculetest.Server, sentAt map[string]time.Time, target map[string]string) (lat []time.Duration, dup, missing int) {
	byWs := map[string][]moleculetest.Notification{}
	for text, ws := range target {
		if _, ok := byWs[ws]; !ok {
			byWs[ws] = srv.Notifications(ws)
		}
		seen := 0
		for _, nt := range byWs[ws] {
			if nt.Message == "echo: "+text {
				if seen == 0 {
					lat = append(lat, nt.At.Sub(sentAt[text]))
				}
				seen++
			}
		}
		switch {
		case seen == 0:
			missing++
		case seen > 1:
			dup += seen - 1
		}
	}
	return lat, dup, missing
}

func requestKind(r moleculetest.RecordedRequest) string {
	switch {
	case strings.HasSuffix(r.Path, "/activity") && r.Method == http.MethodGet && strings.Contains(r.Query, "type=broadcast_receive"):
		return "broadcast" // the poller's second feed query (internal/poller/broadcast.go)
	case strings.HasSuffix(r.Path, "/activity") && r.Method == http.MethodGet:
		return "activity"
	case strings.HasSuffix(r.Path, "/state"):
		return "state"
	case r.Path == "/registry/heartbeat":
		return "heartbeat"
	case strings.HasSuffix(r.Path, "/events/stream"):
		return "stream"
	}
	return "other"
}

func bodyWorkspace(body []byte) string {
	const k = `"workspace_id":"`
	i := bytes.Index(body, []byte(k))
	if i < 0 {
		return ""
	}
	rest := body[i+len(k):]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// procRSS is VmRSS in bytes, and of it the file-backed pages (RssFile: the
// executable's pages read in, which no allocation change moves).
func procRSS(b *testing.B, pid int) (rss, file int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	kb := func(v string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n << 10
	}
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			rss = kb(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			file = kb(v)
		}
	}
	return rss, file
}

// timeWait counts sockets in TIME_WAIT to or from the double's port.
func timeWait(b *testing.B, base string) int {
	u, err := url.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	hexPort := fmt.Sprintf(":%04X", port)
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 3 && f[3] == "06" && (strings.HasSuffix(f[1], hexPort) || strings.HasSuffix(f[2], hexPort)) {
				n++
			}
		}
	}
	return n
}

// scrapeGo reads go_goroutines, go_memstats_heap_inuse_bytes and
// go_memstats_stack_inuse_bytes from the relay's /metrics.
func scrapeGo(addr string) (goroutines int, heap, stack float64) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			goroutines = int(f)
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			heap, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_stack_inuse_bytes "); ok {
			stack, _ = strconv.ParseFloat(v, 64)
		}
	}
	return goroutines, heap, stack
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func withoutMolecule(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "MOLECULE_") && !strings.HasPrefix(e, "NATS_") {
			out = append(out, e)
		}
	}
	return out
}

func loadAvg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// capped keeps the first 64 KiB written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := 64<<10 - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

var _ io.Writer = (*capped)(nil)

// writeRequestLog writes the double's request log, one line a request:
// seconds since start, method, path, query and status.
func writeRequestLog(b *testing.B, srv *moleculetest.Server, start time.Time, path string) {
	var buf bytes.Buffer
	for _, r := range srv.Requests() {
		fmt.Fprintf(&buf, "%.3f %s %s %s %d\n", r.At.Sub(start).Seconds(), r.Method, r.Path, r.Query, r.Status)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		b.Errorf("-fleet-log: %v", err)
	}
}
