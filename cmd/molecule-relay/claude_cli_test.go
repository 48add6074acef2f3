package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// claudeVersion is the Claude Code CLI .ci/run installs from npm.
const claudeVersion = "2.1.332"

// claudeCLI finds Claude Code's CLI: MOLECULE_CLAUDE_BIN, else claude on
// PATH; the test is skipped without it.
func claudeCLI(t *testing.T) string {
	t.Helper()
	p := os.Getenv("MOLECULE_CLAUDE_BIN")
	if p == "" {
		var err error
		if p, err = exec.LookPath("claude"); err != nil {
			t.Skip("Claude Code's CLI is not installed (npm install -g @anthropic-ai/claude-code@" + claudeVersion + ", as .ci/run does): " +
				"the health-check test runs `claude mcp list` against molecule-relay mcp")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, p, "--version").CombinedOutput(); err != nil {
		t.Skipf("Claude Code's CLI %s does not run here (%v: %s); it needs Node.js 20 or later", p, err, out)
	}
	return p
}

// The real client's health check: `claude mcp list` starts molecule-relay
// mcp, does the MCP handshake and reports "✔ Connected" or "✘ Failed to
// connect". Ten checks in a row all say Connected: with no session
// running, while a session holds the channel (the checked instance waits
// and still answers the handshake), and right after a session was stopped
// the way Claude Code stops servers (SIGINT, SIGTERM, SIGKILL).
func TestClaudeCodeHealthCheckConnectedTenTimesInARow(t *testing.T) {
	claude := claudeCLI(t)
	w := newMCPWorld(t)
	home, proj := t.TempDir(), t.TempDir()
	claudeEnv := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	runClaude := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, claude, args...)
		cmd.Dir, cmd.Env = proj, claudeEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	add := []string{"mcp", "add", "molecule"}
	for _, kv := range w.environ {
		if !strings.HasPrefix(kv, "MOLECULE_LOG_LEVEL=") {
			add = append(add, "-e", kv)
		}
	}
	runClaude(append(add, "--", relayBin(t), "mcp")...)

	var session *mcpProc
	for i := range 10 {
		switch i % 3 {
		case 1: // a live session holds the channel during the check
			session = w.session()
		case 2: // the check comes right after Claude Code stopped that session
			session.stopClaudeWay()
		}
		start := time.Now()
		out := runClaude("mcp", "list")
		line := ""
		for l := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(l, "molecule:") {
				line = l
			}
		}
		t.Logf("check %d (%s): %s", i+1, time.Since(start).Round(time.Millisecond), line)
		if !strings.Contains(line, "✔ Connected") {
			t.Fatalf("check %d: %q, want ✔ Connected\n%s", i+1, line, out)
		}
	}
}
