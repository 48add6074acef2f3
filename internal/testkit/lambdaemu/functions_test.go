package lambdaemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/lambdaemu"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The real bootstraps, built once (for this machine's architecture, with
// the Lambda build flags) by functionBinaries.
var (
	fnOnce sync.Once
	fnDir  string
	fnErr  error
)

func functionBinaries(t testing.TB) string {
	t.Helper()
	fnOnce.Do(func() {
		root := filepath.Join("..", "..", "..")
		for _, fn := range []string{"poller", "dispatcher", "replier"} {
			if _, err := os.Stat(filepath.Join(root, "functions", fn, "main.go")); err != nil {
				fnErr = fmt.Errorf("functions/%s/main.go: %w", fn, err)
				return
			}
		}
		fnDir = filepath.Dir(echofnBin)
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", fnDir+string(filepath.Separator),
			"./functions/poller", "./functions/dispatcher", "./functions/replier")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			fnErr = fmt.Errorf("build functions: %w\n%s", err, out)
		}
	})
	if fnErr != nil {
		t.Fatalf("%v", fnErr)
	}
	return fnDir
}

// fnResult is internal/lambdafn.Result as the runtime returns it.
type fnResult struct {
	Stage        string `json:"stage"`
	Published    int    `json:"published"`
	Handled      uint64 `json:"handled"`
	Replied      uint64 `json:"replied"`
	DeadLettered uint64 `json:"dead_lettered"`
	Redialled    bool   `json:"redialled"`
	Warm         bool   `json:"warm"`
}

// replierTimeout is the replier's invocation timeout: it fetches a reply
// only while its NotifyTimeout (30 s) plus a 2 s start margin still fit
// before the deadline (less the 1 s drain margin set below). It returns as
// soon as the queue is empty.
const replierTimeout = 40 * time.Second

// schedulerEvent is what EventBridge Scheduler sends a Lambda target by
// default (the functions do not interpret it).
const schedulerEvent = `{"version":"0","id":"e6d2a1c4-0000-4000-8000-000000000000","detail-type":"Scheduled Event","source":"aws.scheduler","account":"000000000000","time":"2026-01-01T00:00:00Z","region":"us-east-1","resources":["arn:aws:scheduler:us-east-1:000000000000:schedule/default/relay"],"detail":"{}"}`

type lambdaFn struct {
	name string
	emu  *lambdaemu.Emulator
	proc *lambdaemu.Process
}

func startFunction(t *testing.T, dir, name string, env []string) *lambdaFn {
	t.Helper()
	emu := lambdaemu.Start(t, lambdaemu.Options{FunctionName: "relay-" + name})
	proc := lambdaemu.RunBootstrap(t, emu, filepath.Join(dir, name), env)
	return &lambdaFn{name: name, emu: emu, proc: proc}
}

func (f *lambdaFn) invoke(t *testing.T, timeout time.Duration) (fnResult, lambdaemu.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	res, err := f.emu.Invoke(ctx, []byte(schedulerEvent), timeout)
	if err != nil {
		t.Fatalf("%s: invoke: %v", f.name, err)
	}
	var r fnResult
	if res.ErrorType == "" {
		if err := json.Unmarshal(res.Payload, &r); err != nil {
			t.Fatalf("%s: response %q: %v", f.name, res.Payload, err)
		}
	}
	return r, res
}

func (f *lambdaFn) mustInvoke(t *testing.T, timeout time.Duration) fnResult {
	t.Helper()
	r, res := f.invoke(t, timeout)
	if err := res.Err(); err != nil {
		t.Fatalf("%s: %v\noutput:\n%s", f.name, err, f.proc.Output())
	}
	if res.Duration > timeout {
		t.Errorf("%s answered after %s, past its %s timeout", f.name, res.Duration, timeout)
	}
	return r
}

// TestFunctionsEndToEnd runs the three real bootstrap binaries as Lambda
// execution environments against embedded NATS and the platform double:
// scheduled invocations carry messages from the platform to replies; warm
// invocations reuse the environment's connection; a NATS restart under the
// environments is survived; a drain respects a short deadline.
func TestFunctionsEndToEnd(t *testing.T) {
	dir := functionBinaries(t)
	ns := natstest.Start(t)
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("lambda-agent")
	env := []string{
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"MOLECULE_HANDLER=echo",
		// The dispatcher starts a handler only when HandlerTimeout (plus a
		// 2 s start margin) still fits before the invocation's deadline.
		"MOLECULE_HANDLER_TIMEOUT=5s",
		"MOLECULE_SSE=false",
		// One poll per invocation: this test drives the stages one
		// invocation at a time (TestFunctionsEventDriven runs the window).
		"MOLECULE_POLLER_WINDOW=false",
		"MOLECULE_DRAIN_IDLE=300ms",
		"MOLECULE_DRAIN_MARGIN=1s",
	}
	poller := startFunction(t, dir, "poller", env)
	disp := startFunction(t, dir, "dispatcher", env)
	repl := startFunction(t, dir, "replier", env)

	// Cold: registers the workspace in poll mode and seeds the cursor.
	if r := poller.mustInvoke(t, 20*time.Second); r.Warm {
		t.Errorf("first poller invocation reported a warm connection")
	}
	t.Logf("poller cold start (process start → first response: NATS dial, topology, register, first poll): %s",
		time.Since(poller.proc.StartedAt()).Round(time.Millisecond))
	clients := ns.NumClients()

	sent := []string{}
	send := func(n int) {
		t.Helper()
		for range n {
			text := "hello " + strconv.Itoa(len(sent))
			st, body, err := plat.SendCanvas(context.Background(), ws.ID, text)
			if err != nil || st != 200 {
				t.Fatalf("send: %d %s %v", st, body, err)
			}
			sent = append(sent, "echo: "+text)
		}
	}
	notified := func() []string {
		var out []string
		for _, n := range plat.Notifications(ws.ID) {
			out = append(out, n.Message)
		}
		slices.Sort(out)
		return out
	}
	cycle := func(wantNew int) (fnResult, fnResult, fnResult) {
		t.Helper()
		p := poller.mustInvoke(t, 20*time.Second)
		d := disp.mustInvoke(t, 20*time.Second)
		r := repl.mustInvoke(t, replierTimeout)
		if p.Published != wantNew || d.Handled != uint64(wantNew) || r.Replied != uint64(wantNew) {
			t.Errorf("cycle: published %d, handled %d, replied %d; want %d each", p.Published, d.Handled, r.Replied, wantNew)
		}
		want := slices.Clone(sent)
		slices.Sort(want)
		if got := notified(); !slices.Equal(got, want) {
			t.Errorf("notifications %q, want %q", got, want)
		}
		return p, d, r
	}

	send(3)
	p, _, _ := cycle(3)
	if !p.Warm {
		t.Errorf("second poller invocation did not reuse its connection")
	}
	// The warm poller made no new connection (the two others made theirs).
	if got := ns.NumClients(); got != clients+2 {
		t.Errorf("%d NATS clients, want %d (one per execution environment)", got, clients+2)
	}
	send(2)
	p, d, r := cycle(2)
	if !p.Warm || !d.Warm || !r.Warm {
		t.Errorf("warm cycle: poller %v, dispatcher %v, replier %v; want every connection reused", p.Warm, d.Warm, r.Warm)
	}
	if poller.proc.Starts() != 1 || disp.proc.Starts() != 1 || repl.proc.Starts() != 1 {
		t.Errorf("execution environments restarted")
	}

	// NATS restarts under the warm environments: each finds its connection
	// dead at the start of the next invocation and redials.
	restarted := ns.Restart(t)
	send(2)
	p, d, r = cycle(2)
	// The poller runs right after the restart, while its connection is
	// still down, so it redials; the later ones may find theirs already
	// reconnected by the client. Either way each environment keeps one
	// connection.
	if !p.Redialled {
		t.Errorf("first invocation after a NATS restart did not redial: %+v", p)
	}
	if (!d.Redialled && !d.Warm) || (!r.Redialled && !r.Warm) {
		t.Errorf("after a NATS restart: dispatcher %+v, replier %+v", d, r)
	}
	if got := restarted.NumClients(); got != clients+2 {
		t.Errorf("%d NATS clients after the restart, want %d (one per execution environment)", got, clients+2)
	}

	t.Run("drain respects a short deadline", func(t *testing.T) {
		send(1)
		poller.mustInvoke(t, 20*time.Second)
		// 4 s leave no room for a 5 s handler: the invocation fails loudly
		// with a ConfigError naming the variable (issue 10; it used to
		// succeed having handled nothing), leaving the message queued.
		if _, res := disp.invoke(t, 4*time.Second); res.ErrorType != "ConfigError" || !strings.Contains(res.ErrorMessage, "MOLECULE_HANDLER_TIMEOUT") {
			t.Errorf("a 4 s invocation with a 5 s handler: %q %q, want a ConfigError naming MOLECULE_HANDLER_TIMEOUT", res.ErrorType, res.ErrorMessage)
		}
		// 9 s do (1 s margin + 5 s handler + 2 s start margin).
		if d := disp.mustInvoke(t, 9*time.Second); d.Handled != 1 {
			t.Errorf("handled %d, want 1", d.Handled)
		}
		if r := repl.mustInvoke(t, replierTimeout); r.Replied != 1 {
			t.Errorf("replied %d, want 1", r.Replied)
		}
		if got := len(plat.Notifications(ws.ID)); got != len(sent) {
			t.Errorf("%d notifications for %d messages", got, len(sent))
		}
	})

	// A peer's message is answered through /a2a within one replier
	// invocation: the X-Timeout (10 min by default) is shortened to fit the
	// invocation instead of the reply being handed back until it is
	// dead-lettered.
	t.Run("a peer is answered through a2a", func(t *testing.T) {
		peer := plat.CreateWorkspace("lambda-peer")
		pc, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: peer.ID, Token: peer.Token})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Register(context.Background(), molecule.RegisterRequest{}); err != nil {
			t.Fatal(err)
		}
		if st, body, err := plat.SendPeer(context.Background(), peer, ws.ID, "hello from a peer"); err != nil || st != 200 {
			t.Fatalf("peer send: %d %s %v", st, body, err)
		}
		if p := poller.mustInvoke(t, 20*time.Second); p.Published != 1 {
			t.Fatalf("published %d, want 1", p.Published)
		}
		if d := disp.mustInvoke(t, 20*time.Second); d.Handled != 1 {
			t.Fatalf("handled %d, want 1", d.Handled)
		}
		if r := repl.mustInvoke(t, replierTimeout); r.Replied != 1 || r.DeadLettered != 0 {
			t.Fatalf("replier: %+v; want the peer reply posted", r)
		}
		calls := plat.A2ACalls(peer.ID)
		if len(calls) != 1 || calls[0].CallerID != ws.ID || !strings.Contains(string(calls[0].Body), "echo: hello from a peer") {
			t.Fatalf("a2a calls to the peer: %+v", calls)
		}
		for _, rq := range plat.Requests() {
			if rq.Path == "/workspaces/"+peer.ID+"/a2a" {
				if xt, err := strconv.Atoi(rq.Header.Get("X-Timeout")); err != nil || xt < 5 || xt >= int(replierTimeout/time.Second) {
					t.Errorf("X-Timeout %q; want it to fit the %s invocation", rq.Header.Get("X-Timeout"), replierTimeout)
				}
			}
		}
	})
}

// TestFunctionErrorTypes checks that failures reach the runtime as named
// error types (Lambda's errorType).
func TestFunctionErrorTypes(t *testing.T) {
	dir := functionBinaries(t)
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("broken-agent")
	tests := []struct {
		name, fn string
		env      []string
		wantType string
	}{
		{"no platform URL", "poller", []string{"NATS_URL=nats://127.0.0.1:1", "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token}, "ConfigError"},
		{"unknown handler", "dispatcher", []string{"NATS_URL=nats://127.0.0.1:1", "MOLECULE_HANDLER=nonsense:"}, "ConfigError"},
		{"NATS unreachable", "replier", []string{"NATS_URL=nats://127.0.0.1:1", "NATS_CONNECT_TIMEOUT=500ms",
			"MOLECULE_PLATFORM_URL=" + plat.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token}, "ConnectError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFunction(t, dir, tc.fn, tc.env)
			// A replier invocation must have room for one notify, or it
			// fails with a ConfigError before it dials (issue 10).
			timeout := 10 * time.Second
			if tc.fn == "replier" {
				timeout = replierTimeout
			}
			_, res := f.invoke(t, timeout)
			if res.ErrorType != tc.wantType {
				t.Errorf("errorType %q (%s), want %q\noutput:\n%s", res.ErrorType, res.ErrorMessage, tc.wantType, f.proc.Output())
			}
			// A handled error does not end the execution environment.
			if _, res := f.invoke(t, timeout); res.ErrorType != tc.wantType || f.proc.Starts() != 1 {
				t.Errorf("second invocation: %q, starts %d", res.ErrorType, f.proc.Starts())
			}
		})
	}
}
