package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var costRuns = flag.Int("console.cost", 0, "TestConsoleCostToTheRelay: interleaved runs of each mode (0: skip the measurement)")

// The console's cost to a running relay, measured on the real binary
// (connect, embedded NATS, the echo handler, the platform double): the
// relay's CPU time and RSS while it answers a burst of messages with no
// console, with the console served but no page open, and with a page
// watching the flow (its event stream). The modes are interleaved, run
// after run, and the medians reported; the open page also measures each
// message's arrival (the poller's publish) to its delivery on the page's
// stream. Run it with
//
//	go test ./internal/console -run TestConsoleCostToTheRelay -v -timeout 0 -console.cost 5
func TestConsoleCostToTheRelay(t *testing.T) {
	if *costRuns == 0 {
		t.Skip("a measurement: run with -console.cost N")
	}
	bin := filepath.Join(t.TempDir(), "molecule-relay")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/molecule-relay").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// No rate limit: the burst measures the relay, not its waits for the
	// platform's budget.
	srv := moleculetest.NewServer(moleculetest.WithRateLimit(0, 0))
	t.Cleanup(srv.Close)
	const msgs, rate = 300, 50 // messages per run, per second
	type result struct{ cpuMS, idleMS, rssMB float64 }
	results := map[string][]result{}
	var lat []time.Duration
	modes := []string{"off", "closed", "open"}
	for run := 0; run < *costRuns; run++ {
		for i := range modes {
			mode := modes[(i+run)%len(modes)] // each mode in each position
			ws := srv.CreateWorkspace(fmt.Sprintf("cost-%d-%s", run, mode))
			cpu, idle, rss, l := costRun(t, bin, srv, ws, mode, msgs, rate)
			results[mode] = append(results[mode], result{cpu, idle, rss})
			lat = append(lat, l...)
			t.Logf("run %d %-6s: CPU %.0f ms (%.2f ms per message), idle %.0f ms in %s, RSS %.1f MB", run, mode, cpu, cpu/msgs, idle, idleWindow, rss)
		}
	}
	for _, mode := range modes {
		var cpu, idle, rss []float64
		for _, r := range results[mode] {
			cpu, idle, rss = append(cpu, r.cpuMS), append(idle, r.idleMS), append(rss, r.rssMB)
		}
		t.Logf("median %-6s: CPU %.0f ms for %d messages (%.2f ms each), idle %.0f ms in %s, RSS %.1f MB", mode, median(cpu), msgs, median(cpu)/msgs, median(idle), idleWindow, median(rss))
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("arrival to the page's stream: median %s, p99 %s, max %s (%d messages)", lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], len(lat))
	}
}

// idleWindow is how long the relay's idle CPU time is measured, after
// the burst.
const idleWindow = 10 * time.Second

// costRun runs the relay on ws in mode, sends msgs messages at rate per
// second, and returns its CPU time (ms) over the burst and over
// idleWindow after it, and its RSS (MB) at the end.
func costRun(t *testing.T, bin string, srv *moleculetest.Server, ws moleculetest.Workspace, mode string, msgs, rate int) (cpuMS, idleMS, rssMB float64, lat []time.Duration) {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "connect")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOLECULE_PLATFORM_URL=" + srv.URL(),
		"MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "MOLECULE_HANDLER=echo",
		"NATS_STORE_DIR=" + t.TempDir(), "MOLECULE_LOG_LEVEL=warn"}
	if mode != "off" {
		cmd.Env = append(cmd.Env, "MOLECULE_CONSOLE_LISTEN="+addr, "MOLECULE_CONSOLE_TOKEN=cost")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }() // measured: no graceful stop to wait for
	send := func(text string) {
		if code, _, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code/100 != 2 {
			t.Fatalf("send: %d %v", code, err)
		}
	}
	answered := func(n int) {
		pipelinetest.Eventually(t, 60*time.Second, fmt.Sprintf("%d answers", n), func() bool { return len(srv.Notifications(ws.ID)) >= n })
	}
	send("warm-up")
	answered(1)
	got := make(chan []time.Duration, 1)
	if mode == "open" {
		ready := make(chan struct{})
		go func() { got <- watchStream(ctx, "http://"+addr+"/api/flow/stream", ready) }()
		select { // the console answers the stream once it holds its subscriptions
		case <-ready:
		case <-time.After(10 * time.Second):
			t.Fatal("the console's flow stream did not open")
		}
	}
	cpu0 := cpuTime(t, cmd.Process.Pid)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for i := 0; i < msgs; i++ {
		<-tick.C
		send("message " + strconv.Itoa(i))
	}
	tick.Stop()
	answered(msgs + 1)
	cpu1 := cpuTime(t, cmd.Process.Pid)
	<-time.After(idleWindow) // a measurement window, not a wait for an event
	idle := cpuTime(t, cmd.Process.Pid) - cpu1
	rss := rssOf(t, cmd.Process.Pid)
	if mode == "open" {
		cancel()
		lat = <-got
	}
	return float64((cpu1 - cpu0).Milliseconds()), float64(idle.Milliseconds()), rss, lat
}

// watchStream reads the console's flow stream as a page does and returns,
// for each message seen arriving, the time from its polled_at to its
// delivery here. ready is closed once the stream is open.
func watchStream(ctx context.Context, url string, ready chan<- struct{}) []time.Duration {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer cost")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	close(ready)
	var out []time.Duration
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Activity string    `json:"activity"`
			PolledAt time.Time `json:"polled_at"`
		}
		if json.Unmarshal([]byte(data), &m) == nil && m.Activity != "" && !m.PolledAt.IsZero() && !seen[m.Activity] {
			seen[m.Activity] = true
			out = append(out, time.Since(m.PolledAt))
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cpuTime is the process's user and system time (/proc/PID/stat).
func cpuTime(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// rssOf is the process's resident set (VmRSS) in MB.
func rssOf(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
