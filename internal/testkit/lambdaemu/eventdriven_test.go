package lambdaemu_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/lambdaemu"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// relayStack is the three real bootstraps as functions of one emulated
// Lambda service, chained as template.yaml chains them: the poller wakes
// the dispatcher (by ARN), the dispatcher wakes the replier (by name) and
// fans out to itself. Only the poller has a schedule.
type relayStack struct {
	svc                *lambdaemu.Service
	poller, disp, repl *lambdaemu.Function
	plat               *moleculetest.Server
	agent, peer        moleculetest.Workspace
	pollerTime         time.Duration
}

type stackOptions struct {
	handler       string // MOLECULE_HANDLER; if not set, echo
	concurrency   int    // the dispatcher's MOLECULE_CONCURRENCY; if not set, 16
	fanout        int    // MOLECULE_DISPATCHER_FANOUT and the reserved concurrency; if not set, 4
	pollerTimeout time.Duration
	dispTimeout   time.Duration         // the dispatcher's function timeout; if not set, 15 s
	margin        string                // MOLECULE_DRAIN_MARGIN; if not set, 1s
	platform      []moleculetest.Option // options of the platform double
}

func startRelayStack(t testing.TB, opts stackOptions) *relayStack {
	t.Helper()
	dir := functionBinaries(t)
	if opts.handler == "" {
		opts.handler = "echo"
	}
	if opts.concurrency == 0 {
		opts.concurrency = 16
	}
	if opts.fanout == 0 {
		opts.fanout = 4
	}
	if opts.pollerTimeout == 0 {
		opts.pollerTimeout = 10 * time.Second
	}
	if opts.dispTimeout == 0 {
		opts.dispTimeout = 15 * time.Second
	}
	if opts.margin == "" {
		opts.margin = "1s"
	}
	ns := natstest.Start(t)
	plat := moleculetest.NewServer(opts.platform...)
	t.Cleanup(plat.Close)
	s := &relayStack{svc: lambdaemu.StartService(t), plat: plat, pollerTime: opts.pollerTimeout}
	s.agent = plat.CreateWorkspace("lambda-agent")
	s.peer = plat.CreateWorkspace("lambda-peer")
	pc, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: s.peer.ID, Token: s.peer.Token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Register(context.Background(), molecule.RegisterRequest{}); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + s.agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + s.agent.Token,
		"MOLECULE_HANDLER=" + opts.handler,
		"MOLECULE_HANDLER_TIMEOUT=5s",
		"MOLECULE_DRAIN_MARGIN=" + opts.margin,
		"MOLECULE_LOG_FORMAT=json",
		// What Lambda sets with the template's LoggingConfig.
		"AWS_LAMBDA_LOG_FORMAT=JSON",
		"AWS_LAMBDA_LOG_LEVEL=INFO",
	}
	with := func(kv ...string) []string { return append(slices.Clone(env), kv...) }
	s.repl = s.svc.AddFunction(lambdaemu.FunctionConfig{Name: "relay-replier", Bootstrap: filepath.Join(dir, "replier"),
		Timeout: replierTimeout, Env: with()})
	s.disp = s.svc.AddFunction(lambdaemu.FunctionConfig{Name: "relay-dispatcher", Bootstrap: filepath.Join(dir, "dispatcher"),
		Timeout: opts.dispTimeout, ReservedConcurrency: opts.fanout,
		Env: with("MOLECULE_REPLIER_FUNCTION=relay-replier", fmt.Sprintf("MOLECULE_DISPATCHER_FANOUT=%d", opts.fanout),
			fmt.Sprintf("MOLECULE_CONCURRENCY=%d", opts.concurrency))})
	s.poller = s.svc.AddFunction(lambdaemu.FunctionConfig{Name: "relay-poller", Bootstrap: filepath.Join(dir, "poller"),
		Timeout: opts.pollerTimeout, ReservedConcurrency: 1,
		Env: with("MOLECULE_DISPATCHER_FUNCTION=" + s.disp.ARN())})
	// The poller's schedule, as template.yaml sets it: one period per
	// function timeout, so the next window opens as the last one closes.
	s.poller.Every(opts.pollerTimeout, []byte(schedulerEvent))
	// The first window registers the agent and seeds its cursor before it
	// starts heartbeating.
	pipelinetest.Eventually(t, 30*time.Second, "the poller's first heartbeat", func() bool { return plat.Status(s.agent.ID).Heartbeats > 0 })
	return s
}

// replies returns the agent's replies by their text, with when the
// platform received them.
func (s *relayStack) replies() map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, n := range s.plat.Notifications(s.agent.ID) {
		out[n.Message] = append(out[n.Message], n.At)
	}
	for _, c := range s.plat.A2ACalls(s.peer.ID) {
		if c.CallerID == s.agent.ID {
			txt := a2aReplyText(c.Body)
			out[txt] = append(out[txt], c.At)
		}
	}
	return out
}

// a2aReplyText finds the "echo: ..." text in a JSON-RPC reply body.
func a2aReplyText(body []byte) string {
	s := string(body)
	i := strings.Index(s, `"text":"`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`"text":"`):]
	j := strings.IndexByte(s, '"')
	if j < 0 {
		return ""
	}
	return s[:j]
}

func (s *relayStack) send(t testing.TB, text string, peer bool) time.Time {
	t.Helper()
	at := time.Now()
	var st int
	var body []byte
	var err error
	if peer {
		st, body, err = s.plat.SendPeer(context.Background(), s.peer, s.agent.ID, text)
	} else {
		st, body, err = s.plat.SendCanvas(context.Background(), s.agent.ID, text)
	}
	if err != nil || st != http.StatusOK {
		t.Fatalf("send %q: %d %s %v", text, st, body, err)
	}
	return at
}

func (s *relayStack) dump(t testing.TB) {
	t.Helper()
	if t.Failed() {
		for _, f := range []*lambdaemu.Function{s.poller, s.disp, s.repl} {
			t.Logf("%s output:\n%s", f.ARN(), f.Output())
		}
	}
}

// TestFunctionsEventDriven: with only the poller's schedule, a canvas
// user's and a peer's messages are answered within seconds: the poller's
// live window picks them up through the SSE wake-up, its wake-up invokes
// the dispatcher, whose wake-up invokes the replier (issue 10). Then a
// burst for a slow handler spreads over several concurrent dispatcher
// invocations (the fan-out), each message answered once.
func TestFunctionsEventDriven(t *testing.T) {
	var slow atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			slow.Add(1)
			select { // the handler's work, not a wait in the test
			case <-time.After(400 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"reply":"handled"}`)
	}))
	t.Cleanup(hs.Close)
	// A 9 s dispatcher with a 5 s handler timeout admits handlers for its
	// first second only (9 s - 1 s margin - 5 s - 2 s start margin): the
	// burst needs successors, not just the first four invocations.
	s := startRelayStack(t, stackOptions{handler: "http:" + hs.URL + "/slow", concurrency: 2, fanout: 4, dispTimeout: 9 * time.Second})
	t.Cleanup(func() { s.dump(t) })

	sentAt := s.send(t, "hello canvas", false)
	s.send(t, "hello peer", true)
	pipelinetest.Eventually(t, 15*time.Second, "both messages answered", func() bool { return len(s.replies()["handled"]) == 2 })
	latency := time.Since(sentAt)
	t.Logf("two messages answered %s after they were sent (poller window, SSE wake-up, two invoke hops)", latency.Round(time.Millisecond))
	if latency > s.pollerTime/2 {
		t.Errorf("answered after %s; the event-driven path should take about a second", latency)
	}
	for _, f := range []*lambdaemu.Function{s.disp, s.repl} {
		calls := f.Calls()
		for _, c := range calls {
			if c.Type != "Event" || !strings.Contains(string(c.Payload), "molecule-relay.wake") {
				t.Errorf("%s: an invocation %s %q; want only wake-ups", f.ARN(), c.Type, c.Payload)
			}
		}
	}
	if s.svc.BadSignatures() != 0 {
		t.Errorf("%d invocations refused for their signature", s.svc.BadSignatures())
	}

	// The burst: 24 messages for a 400 ms handler, 2 at a time per
	// dispatcher invocation, fan-out 4: at most 8 handlers at once, so more
	// than one second of work, more than four invocations can admit.
	const burst = 24
	for i := range burst {
		s.send(t, fmt.Sprintf("burst %d", i), i%3 != 0)
	}
	pipelinetest.Eventually(t, 60*time.Second, "the burst answered", func() bool { return len(s.replies()["handled"]) == 2+burst })
	_, most := s.disp.Emulator().Concurrency()
	t.Logf("burst of %d: %d dispatcher environments, %d invocations at once, handler ran %d times",
		burst, s.disp.Environments(), most, slow.Load())
	if most < 2 {
		t.Errorf("at most %d dispatcher invocation(s) at once; want the burst spread over several", most)
	}
	if !strings.Contains(s.disp.Output(), `"message":"hand-over: starting more dispatcher invocations"`) {
		t.Errorf("no dispatcher handed over; the burst needed successors beyond the first invocations")
	}
	if n := slow.Load(); n != 2+burst {
		t.Errorf("handler ran %d times for %d messages", n, 2+burst)
	}
	// Every invocation's log lines carry its request id: the stages log
	// with a context that descends from the invocation's. Only the agent
	// API's line, logged when it is built (without a context), and
	// SIGTERM's, between invocations, carry none.
	done := 0
	for _, line := range strings.Split(s.disp.Output(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		if strings.Contains(line, `"message":"invocation done"`) {
			done++
		}
		if strings.Contains(line, `"message":"agent API listening"`) || strings.Contains(line, `"message":"SIGTERM: `) {
			continue
		}
		if !strings.Contains(line, `"requestId":"`) {
			t.Errorf("a log line without the request id: %s", line)
		}
	}
	if done == 0 {
		t.Errorf("no dispatcher line says \"invocation done\"")
	}
}
