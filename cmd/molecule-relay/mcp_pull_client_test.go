package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// mcpSDKVersion is the official MCP TypeScript SDK the pull client runs on.
const mcpSDKVersion = "1.32.2"

// mcpSDKDir returns a directory with @modelcontextprotocol/sdk installed
// and testdata/pull-client.mjs beside it (npmDir).
func mcpSDKDir(t *testing.T) string {
	t.Helper()
	dir := npmDir(t, "MOLECULE_MCP_SDK_DIR", "@modelcontextprotocol/sdk", mcpSDKVersion)
	script, err := os.ReadFile(filepath.Join("testdata", "pull-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// ESM resolves packages from the script's directory, not NODE_PATH.
	if err := os.WriteFile(filepath.Join(dir, "pull-client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// npmDir returns a directory with pkg@version installed: the one env
// names, else a cache directory filled by npm once. Without node or npm,
// or when npm cannot install it, the test is skipped, saying so.
func npmDir(t *testing.T, env, pkg, version string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install nodejs npm, as .ci/run does): this test runs %s@%s against molecule-relay mcp", tool, pkg, version)
		}
	}
	dir := os.Getenv(env)
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir = filepath.Join(cache, "molecule-relay-test", strings.NewReplacer("@", "", "/", "-").Replace(pkg)+"-"+version)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--silent", pkg+"@"+version).CombinedOutput()
		if err != nil {
			t.Skipf("npm could not install %s@%s into %s (%v); %s names a directory that has it\n%s", pkg, version, dir, err, env, out)
		}
	}
	return dir
}

// pullClient is one run of testdata/pull-client.mjs: a node process whose
// MCP client starts its own molecule-relay mcp, as Codex or Cursor do.
type pullClient struct {
	t      *testing.T
	cmd    *exec.Cmd
	events chan map[string]any
	stderr *pipelinetest.LogBuffer
	exited chan struct{}
	pid    int // the mcp process's
}

// startPull runs the pull client against w's platform with settings
// (PULL_ANSWER, PULL_HOLD, PULL_WAIT_SECS) and waits until it connected.
func (w *mcpWorld) startPull(sdk string, settings ...string) *pullClient {
	t := w.t
	t.Helper()
	cmd := exec.Command("node", filepath.Join(sdk, "pull-client.mjs"))
	cmd.Env = append(append(append([]string(nil), w.environ...), settings...),
		"RELAY_BIN="+relayBin(t), "HOME="+t.TempDir(), "PATH="+os.Getenv("PATH"))
	c := &pullClient{t: t, cmd: cmd, events: make(chan map[string]any, 64), stderr: &pipelinetest.LogBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("pull client: non-JSON line %q", sc.Text())
				continue
			}
			c.events <- ev
		}
	}()
	go func() { _ = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("pull client (and its mcp) stderr:\n%s", c.stderr.String())
		}
	})
	ev := c.expect("connected", 30*time.Second)
	c.pid = int(ev["pid"].(float64))
	return c
}

// expect waits for the client's next event and fails unless it is want.
func (c *pullClient) expect(want string, within time.Duration) map[string]any {
	c.t.Helper()
	select {
	case ev := <-c.events:
		if ev["event"] != want {
			c.t.Fatalf("pull client: %v, want event %q", ev, want)
		}
		return ev
	case <-c.exited:
		c.t.Fatalf("pull client exited before %q:\n%s", want, c.stderr.String())
	case <-time.After(within):
		c.t.Fatalf("pull client: no %q within %s:\n%s", want, within, c.stderr.String())
	}
	return nil
}

// serve expects n rounds of wait, message, reply; it returns the texts.
func (c *pullClient) serve(n int, within time.Duration) []string {
	c.t.Helper()
	var texts []string
	for range n {
		c.expect("waiting", within)
		m := c.expect("message", within)
		if r := c.expect("replied", within); r["isError"] == true {
			c.t.Fatalf("reply_to_workspace for %v: %v", m["activity_id"], r["text"])
		}
		texts = append(texts, m["text"].(string))
	}
	return texts
}

func (c *pullClient) kill() {
	_ = syscall.Kill(c.pid, syscall.SIGKILL)
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// answersOnce fails unless the platform got exactly one answer to each text.
func (w *mcpWorld) answersOnce(texts []string) {
	w.t.Helper()
	got := map[string]int{}
	for _, n := range w.plat.Notifications(w.ws.ID) {
		got[n.Message]++
	}
	for _, s := range texts {
		if got["answer to "+s] != 1 {
			w.t.Errorf("%q answered %d times, want once (answers: %v)", s, got["answer to "+s], got)
		}
	}
	if len(got) != len(texts) {
		w.t.Errorf("%d distinct answers on the platform, want %d: %v", len(got), len(texts), got)
	}
}

// The official MCP SDK's client, which drops notifications/claude/channel
// as Codex, Cursor and Gemini CLI do, receives every message by calling
// wait_for_message and answers each once with reply_to_workspace: twenty
// canvas messages, each sent while the client waits, each answered once.
// It logs the latency from the send to wait_for_message's return.
func TestOfficialSDKClientIgnoringNotificationsPullsEveryMessage(t *testing.T) {
	sdk := mcpSDKDir(t)
	w := newMCPWorld(t)
	c := w.startPull(sdk, "PULL_ANSWER=20", "PULL_WAIT_SECS=60")
	var texts []string
	var lat []time.Duration
	for i := range 20 {
		c.expect("waiting", 30*time.Second)
		text := fmt.Sprintf("pull %d", i)
		sent := time.Now()
		w.sendCanvas(text)
		m := c.expect("message", 30*time.Second)
		lat = append(lat, time.Since(sent))
		if m["text"] != text || m["kind"] != "canvas_user" || m["workspace_id"] != w.ws.ID {
			t.Fatalf("wait_for_message returned %v, want %q from the canvas of %s", m, text, w.ws.ID)
		}
		if r := c.expect("replied", 30*time.Second); r["isError"] == true {
			t.Fatalf("reply_to_workspace: %v", r["text"])
		}
		texts = append(texts, text)
	}
	<-c.exited
	w.answersOnce(texts)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("queued message → waiting client (send to wait_for_message's return, %d messages): p50 %s, p90 %s, max %s",
		len(lat), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1])
}

// Exactly once across a crash between wait and reply: a first session
// answers three of six messages, takes a fourth with wait_for_message and
// is SIGKILLed before it replies. The next session is offered the fourth
// again, with the two never taken, and answers them; a third session is
// offered nothing. Every message is answered exactly once.
func TestPullAnsweredOnceAcrossMCPSIGKILLBetweenWaitAndReply(t *testing.T) {
	sdk := mcpSDKDir(t)
	w := newMCPWorld(t)
	first := w.startPull(sdk, "PULL_ANSWER=3", "PULL_HOLD=1", "PULL_WAIT_SECS=30")
	var texts []string
	for i := range 6 {
		texts = append(texts, fmt.Sprintf("message %d", i))
		w.sendCanvas(texts[i])
	}
	answered := first.serve(3, 30*time.Second)
	first.expect("waiting", 30*time.Second)
	held := first.expect("message", 30*time.Second)["text"].(string)
	first.kill() // SIGKILL of the mcp process, then of the client
	if n := len(w.plat.Notifications(w.ws.ID)); n != 3 {
		t.Fatalf("%d answers after the first session, want 3", n)
	}

	second := w.startPull(sdk, "PULL_ANSWER=3", "PULL_WAIT_SECS=30")
	again := second.serve(3, 45*time.Second) // the held one after AckWait (8 s)
	<-second.exited
	if !contains(again, held) {
		t.Fatalf("the message taken and not answered (%q) was not offered again: %v", held, again)
	}
	third := w.startPull(sdk, "PULL_ANSWER=1", "PULL_WAIT_SECS=10")
	third.expect("waiting", 30*time.Second)
	third.expect("timeout", 30*time.Second)
	w.answersOnce(texts)
	t.Logf("exactly once across a SIGKILL between wait and reply: 6 sent; session 1 answered %d and held %q; session 2 answered %d %v; session 3 offered 0; answers on the platform %d",
		len(answered), held, len(again), again, len(w.plat.Notifications(w.ws.ID)))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
