package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// claudeIn runs Claude Code's CLI in proj with its own HOME, and returns
// the line `claude mcp list` prints for server name.
type claudeIn struct {
	t               *testing.T
	bin, home, proj string
	extra           []string // more of Claude Code's environment; later entries win
}

func (c claudeIn) env() []string {
	return append([]string{"HOME=" + c.home, "PATH=" + os.Getenv("PATH"), "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}, c.extra...)
}

func (c claudeIn) run(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir, cmd.Env = c.proj, c.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c claudeIn) listLine(name string) string {
	c.t.Helper()
	out := c.run("mcp", "list")
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, name+":") {
			return l
		}
	}
	c.t.Fatalf("claude mcp list has no %s:\n%s", name, out)
	return ""
}

// The first try (issue 41): with the workspace's settings exported as for
// connect, `molecule-relay mcp install` configures Claude Code, and
// `claude mcp list` then says Connected.
func TestClaudeCodeConnectsAfterMCPInstall(t *testing.T) {
	c := claudeIn{t: t, bin: claudeCLI(t), home: t.TempDir(), proj: t.TempDir()}
	w := newMCPWorld(t)
	cmd := exec.Command(relayBin(t), "mcp", "install", "--claude", c.bin)
	cmd.Dir = c.proj
	cmd.Env = append(c.env(), w.environ...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mcp install: %v\n%s", err, out)
	}
	t.Logf("mcp install:\n%s", out)
	if line := c.listLine("molecule"); !strings.Contains(line, "✔ Connected") {
		t.Fatalf("%q, want ✔ Connected", line)
	}
	if b, _ := os.ReadFile(c.home + "/.claude.json"); bytes.Contains(b, []byte(w.ws.Token)) {
		t.Error("Claude Code's configuration holds the token")
	}
}

// A start that fails says why where Claude Code users look: `claude mcp
// list` shows the reason (not "Connection closed").
func TestClaudeCodeShowsWhyMCPFailedToStart(t *testing.T) {
	c := claudeIn{t: t, bin: claudeCLI(t), home: t.TempDir(), proj: t.TempDir()}
	c.run("mcp", "add", "molecule", "-e", "MOLECULE_PLATFORM_URL=http://127.0.0.1:1", "--", relayBin(t), "mcp")
	line := c.listLine("molecule")
	t.Logf("%s", line)
	if !strings.Contains(line, "✘ Failed to connect") || !strings.Contains(line, "MOLECULE_WORKSPACE_ID") {
		t.Fatalf("%q; want the failure and its reason, naming MOLECULE_WORKSPACE_ID", line)
	}
}

// Without Claude Code: the reason is the first line of stderr, before the
// warnings (one of which may explain it), and the client's initialize is
// answered with it as a JSON-RPC error; exit 2.
func TestMCPStartFailurePrintsItsReasonFirst(t *testing.T) {
	cmd := exec.Command(relayBin(t), "mcp")
	cmd.Env = []string{"HOME=" + t.TempDir(), "MOLECULE_PLATFORM_URL=http://127.0.0.1:1", "MOLECULE_WORKSPACEID=6f1c2b1e-4a57-4c47-9a3e-3c1f2d9b8a01"}
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
		t.Fatalf("exit %v, want 2\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if !strings.HasPrefix(lines[0], "molecule-relay mcp: ") || !strings.Contains(lines[0], "MOLECULE_WORKSPACE_ID") ||
		len(lines) < 2 || !strings.Contains(lines[1], "MOLECULE_WORKSPACEID is not a setting") {
		t.Errorf("stderr:\n%s\nwant the reason first, then the warning", stderr.String())
	}
	var resp struct {
		ID    int `json:"id"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil || !strings.Contains(resp.Error.Message, "MOLECULE_WORKSPACE_ID") || strings.Contains(resp.Error.Message, "\n") {
		t.Errorf("stdout %q (%v); want a JSON-RPC error naming MOLECULE_WORKSPACE_ID, one line", stdout.String(), err)
	}
}

// examples/claude/mcp.json, copied to a project as .mcp.json, reads the
// variables the emulator and the README name (singular: one workspace)
// from Claude Code's environment, the token from a mode-0600 file, and
// mcp's own store; approved, it connects.
func TestClaudeCodeConnectsWithTheExampleMCPJSON(t *testing.T) {
	c := claudeIn{t: t, bin: claudeCLI(t), home: t.TempDir(), proj: t.TempDir()}
	w := newMCPWorld(t)
	example, err := os.ReadFile("../../examples/claude/mcp.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"_IDS", "_TOKENS", "NATS_STORE_DIR", "MOLECULE_WORKSPACE_TOKEN\""} {
		if bytes.Contains(example, []byte(name)) {
			t.Errorf("the example names %s", name)
		}
	}
	bin := t.TempDir()
	if err := os.Symlink(relayBin(t), bin+"/molecule-relay"); err != nil {
		t.Fatal(err)
	}
	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte(w.ws.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	// The approval `claude` asks for on a project's first start.
	approved := `{"projects":{"` + c.proj + `":{"enabledMcpjsonServers":["molecule"],"hasTrustDialogAccepted":true}}}`
	for path, body := range map[string][]byte{c.proj + "/.mcp.json": example, c.home + "/.claude.json": []byte(approved)} {
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := envMap(w.environ)
	c.extra = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "MOLECULE_PLATFORM_URL=" + env["MOLECULE_PLATFORM_URL"],
		"MOLECULE_WORKSPACE_ID=" + env["MOLECULE_WORKSPACE_ID"], "MOLECULE_WORKSPACE_TOKEN_FILE=" + tokenFile}
	if line := c.listLine("molecule"); !strings.Contains(line, "✔ Connected") {
		t.Fatalf("%q, want ✔ Connected", line)
	}
}
