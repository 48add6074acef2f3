package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	// No deadline: a deadline would make the dispatcher's start-margin rule
	// (the Lambda drain's "never start a handler that cannot finish")
	// refuse every 5-minute handler. The test binary's -timeout bounds us.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: environ}, args)
	return result{code, out.String(), errb.String()}
}

func TestUsageErrorsExit2(t *testing.T) {
	// Run where a store would show: a usage error must be refused before
	// anything (an embedded NATS server with its store) is started.
	t.Chdir(t.TempDir())
	for _, args := range [][]string{nil, {"nope"}, {"connect", "--no-such-flag"}, {"connect", "extra"}, {"dlq"}, {"dlq", "show"}, {"dlq", "show", "x"}, {"dlq", "frob"}} {
		if r := runCLI(t, nil, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
	}
	if r := runCLI(t, nil, "help"); r.code != exitOK || !strings.Contains(r.stdout, "connect") {
		t.Errorf("help: %d %q", r.code, r.stdout)
	}
	if entries, err := os.ReadDir("."); err != nil || len(entries) != 0 {
		t.Errorf("usage errors left %v behind (%v)", entries, err)
	}
}

// Bad configuration exits 2 naming the variable, before any network call.
func TestBadConfigExits2BeforeAnyNetworkCall(t *testing.T) {
	var hits atomic.Int64
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer platform.Close()
	nats := natstest.Start(t)
	const token = "secret-token-that-must-not-leak-0000000000"
	good := []string{"MOLECULE_PLATFORM_URL=" + platform.URL, "MOLECULE_WORKSPACE_ID=35637291-d55e-4553-896c-13c2e02fe4f7",
		"MOLECULE_WORKSPACE_TOKEN=" + token, "NATS_URL=" + nats.ClientURL()}
	cases := []struct {
		name    string
		environ []string
		args    []string
		want    string
	}{
		{"no platform", good[1:], nil, "MOLECULE_PLATFORM_URL"},
		{"bad poll interval", append(good, "MOLECULE_POLL_INTERVAL=often"), nil, "MOLECULE_POLL_INTERVAL"},
		{"bad flag value", good, []string{"--page-limit", "9000"}, "MOLECULE_PAGE_LIMIT"},
		{"bad handler", append(good, "MOLECULE_HANDLER=carrier-pigeon:x"), nil, "handler"},
		{"unpaired tokens", append(good, "MOLECULE_WORKSPACE_IDS=b48f61e0-0000-4000-8000-000000000002"), nil, "MOLECULE_WORKSPACE_TOKENS"},
		{"bad nats creds", append(good, "NATS_CREDS=/nonexistent/creds"), nil, "NATS_CREDS"},
		{"unpaired platform urls", append(good, "MOLECULE_WORKSPACE_IDS=b48f61e0-0000-4000-8000-000000000002", "MOLECULE_WORKSPACE_TOKENS="+token,
			"MOLECULE_PLATFORM_URLS="+platform.URL+","+platform.URL), nil, "MOLECULE_PLATFORM_URLS: 2 URLs for 1 ids in MOLECULE_WORKSPACE_IDS"},
		{"unpaired org ids", append(good, "MOLECULE_WORKSPACE_IDS=b48f61e0-0000-4000-8000-000000000002", "MOLECULE_WORKSPACE_TOKENS="+token,
			"MOLECULE_ORG_IDS=o1,o2"), nil, "MOLECULE_ORG_IDS: 2 org ids for 1 ids in MOLECULE_WORKSPACE_IDS"},
		{"platform url beside platform urls, unused", append(good[3:], "MOLECULE_PLATFORM_URL=http://127.0.0.1:1", "MOLECULE_WORKSPACE_IDS=b48f61e0-0000-4000-8000-000000000002",
			"MOLECULE_WORKSPACE_TOKENS="+token, "MOLECULE_PLATFORM_URLS="+platform.URL), nil, "MOLECULE_PLATFORM_URL: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.environ, append([]string{"connect", "--once"}, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming %s", r.code, r.stderr, tc.want)
			}
			if strings.Contains(r.stderr+r.stdout, token) {
				t.Fatal("the token appears in the output")
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the platform got %d requests from a misconfigured run", n)
	}
}

// connect --once works from the environment alone, against the platform
// double and an external NATS server, and never prints the token.
func TestConnectOnceFromEnvironment(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("ci-agent")
	nats := natstest.Start(t)
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + nats.ClientURL(), "MOLECULE_LOG_LEVEL=debug"}

	// First run: registers and seeds the cursor on an empty feed.
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("first run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, text := range []string{"one", "two", "three"} {
		if code, body, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code != 200 {
			t.Fatalf("send: %d %s %v", code, body, err)
		}
	}
	r := runCLI(t, environ, "connect", "--once", "--idle", "200ms", "--json")
	if r.code != exitOK {
		t.Fatalf("second run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Handled, Replied uint64
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Handled != 3 || rep.Replied != 3 {
		t.Fatalf("report %s (%v)", r.stdout, err)
	}
	// Replies are posted concurrently: their order is not promised.
	got := map[string]int{}
	for _, n := range srv.Notifications(ws.ID) {
		got[n.Message]++
	}
	if len(got) != 3 || got["echo: one"] != 1 || got["echo: two"] != 1 || got["echo: three"] != 1 {
		t.Fatalf("notifications %v", got)
	}
	if strings.Contains(r.stdout+r.stderr, ws.Token) {
		t.Fatal("the token appears in the output, even at debug level")
	}

	st := runCLI(t, environ, "status", "--json")
	if st.code != exitOK || !strings.Contains(st.stdout, ws.ID) || !strings.Contains(st.stdout, `"generation": "new"`) {
		t.Fatalf("status: %d\n%s\n%s", st.code, st.stdout, st.stderr)
	}
	if !strings.Contains(st.stdout, `"times_recorded_every_secs": 300`) {
		t.Fatalf("status --json does not say how old its poll and heartbeat times may be:\n%s", st.stdout)
	}
	if strings.Contains(st.stdout+st.stderr, ws.Token) {
		t.Fatal("status shows the token")
	}
	if tbl := runCLI(t, environ, "status"); tbl.code != exitOK || !strings.Contains(tbl.stdout, "MOLECULE_INBOUND") {
		t.Fatalf("status table: %d\n%s", tbl.code, tbl.stdout)
	} else if !strings.Contains(tbl.stdout, "recorded every 5 min") {
		// The times are refreshed every poller.StatusRefresh: the table must
		// say how old one may be.
		t.Fatalf("status table does not say how old its poll and heartbeat times may be:\n%s", tbl.stdout)
	}
	if dl := runCLI(t, environ, "dlq", "list"); dl.code != exitOK || !strings.Contains(dl.stdout, "SEQ") {
		t.Fatalf("dlq list: %d\n%s\n%s", dl.code, dl.stdout, dl.stderr)
	}
}

// A poison message makes connect --once exit 1, and dlq replay puts it back.
func TestConnectOnceFailsOnDeadLetterAndReplayWorks(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("ci-agent")
	nats := natstest.Start(t)
	script := t.TempDir() + "/agent.sh"
	writeScript(t, script, "#!/bin/sh\nif grep -q poison; then echo 'cannot digest' >&2; exit 65; fi\necho fine\n")
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + nats.ClientURL(), "MOLECULE_HANDLER=exec:" + script}
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("seed run: %d %s", r.code, r.stderr)
	}
	for _, text := range []string{"poison", "ok"} {
		if code, _, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code != 200 {
			t.Fatalf("send: %d %v", code, err)
		}
	}
	r := runCLI(t, environ, "connect", "--once", "--idle", "200ms")
	if r.code != exitFailed || !strings.Contains(r.stdout, "dead-lettered 1") {
		t.Fatalf("poison run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := srv.Notifications(ws.ID); len(n) != 1 || n[0].Message != "fine" {
		t.Fatalf("the good message behind the poison one was not answered: %+v", n)
	}
	list := runCLI(t, environ, "dlq", "list", "--json")
	var entries []struct{ Seq uint64 }
	if err := json.Unmarshal([]byte(list.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("dlq list: %s %v", list.stdout, err)
	}
	if show := runCLI(t, environ, "dlq", "show", jsonNum(entries[0].Seq)); show.code != exitOK || !strings.Contains(show.stdout, "permanent") {
		t.Fatalf("dlq show: %d %s %s", show.code, show.stdout, show.stderr)
	}
	writeScript(t, script, "#!/bin/sh\necho digested\n")
	if rp := runCLI(t, environ, "dlq", "replay", jsonNum(entries[0].Seq)); rp.code != exitOK {
		t.Fatalf("replay: %d %s", rp.code, rp.stderr)
	}
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("after replay: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := srv.Notifications(ws.ID); len(n) != 2 || n[1].Message != "digested" {
		t.Fatalf("replayed message not answered once: %+v", n)
	}
	if p := runCLI(t, environ, "dlq", "purge", "--yes"); p.code != exitOK || !strings.Contains(p.stdout, "purged 0") {
		t.Fatalf("purge: %d %s", p.code, p.stdout)
	}
}

func TestDevOnce(t *testing.T) {
	// The embedded server's store goes to a temporary directory, not the
	// default .molecule-relay/nats under the package's source directory.
	// A shell set up for a real platform (several workspaces on several
	// tenants) must not leak into the dev workspace.
	realPlatform := []string{"MOLECULE_WORKSPACE_IDS=a,b", "MOLECULE_WORKSPACE_TOKENS=x,y",
		"MOLECULE_PLATFORM_URLS=http://127.0.0.1:1,http://127.0.0.1:2", "MOLECULE_ORG_IDS=o1,o2"}
	r := runCLI(t, append(realPlatform, "MOLECULE_LOG_LEVEL=warn", "NATS_STORE_DIR="+t.TempDir()), "dev", "--once", "--timeout", "30s")
	if r.code != exitOK || !strings.Contains(r.stdout, "← reply to canvas: echo: hello from the canvas") ||
		!strings.Contains(r.stdout, "← reply to peer") {
		t.Fatalf("dev --once: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// dev --once waits for the replies, not for whatever reaches the double
// first: the example shell agent posts an interim ("working on it…")
// through the agent API before it answers, and --once must not take that
// for the reply.
func TestDevOnceWaitsForRepliesNotInterims(t *testing.T) {
	for _, tool := range []string{"jq", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the shell agent needs it (.ci/run installs it)", tool)
		}
	}
	agent, err := filepath.Abs("../../examples/shell-agent/agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, []string{"MOLECULE_LOG_LEVEL=warn", "NATS_STORE_DIR=" + t.TempDir(),
		"MOLECULE_HANDLER=exec:" + agent, "MOLECULE_HANDLER_ANSWER=json"}, "dev", "--once", "--timeout", "60s")
	if r.code != exitOK || !strings.Contains(r.stdout, "← reply to canvas: working on it…") ||
		!strings.Contains(r.stdout, "← reply to canvas: You said: hello from the canvas.") ||
		!strings.Contains(r.stdout, ": You said: hello from a peer agent.") {
		t.Fatalf("dev --once with an interim-posting agent: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// connect runs until its context ends (SIGINT/SIGTERM in main), finishes
// what it holds and exits 0.
func TestConnectLongRunningStopsCleanly(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("long-running")
	nats := natstest.Start(t)
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + nats.ClientURL(), "MOLECULE_POLL_INTERVAL=200ms", "MOLECULE_LOG_LEVEL=warn"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: environ}, []string{"connect"})
	}()
	waitUntil(t, func() bool { return srv.Status(ws.ID).DeliveryMode == "poll" })
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "still there?"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	waitUntil(t, func() bool { return len(srv.Notifications(ws.ID)) == 1 })
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after the stop; stderr:\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("connect did not stop within 30 s of its context ending")
	}
	if n := srv.Notifications(ws.ID); len(n) != 1 || n[0].Message != "echo: still there?" {
		t.Fatalf("notifications %+v", n)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20 s")
		}
		<-tick.C
	}
}
