package claudecode_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/exampletest"
)

// The relay runs agent.sh as its exec: handler with ANTHROPIC_API_KEY
// passed by MOLECULE_HANDLER_ENV; the stand-in claude (first on PATH)
// answers the prompt it read, and the canvas user gets that text.
func TestClaudeCodeAnswersThroughRelay(t *testing.T) {
	exampletest.Need(t, "sh", "jq")
	exampletest.StandInFirstOnPath(t, "testdata/bin")
	got := exampletest.Ask(t, []string{
		"MOLECULE_HANDLER=exec:" + exampletest.Abs(t, "agent.sh") + " --model sonnet",
		"MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY",
		"ANTHROPIC_API_KEY=sk-ant-test",
	}, "what is 6 x 7?")
	if want := "stand-in Claude read: what is 6 x 7?"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// Without its key (MOLECULE_HANDLER_ENV not set), claude says it is not
// logged in; agent.sh exits EX_TEMPFAIL with claude's words on stderr, so
// the relay retries and never posts the failure as an answer.
func TestClaudeCodeNotLoggedInIsAFailureNotAnAnswer(t *testing.T) {
	exampletest.Need(t, "sh", "jq")
	exampletest.StandInFirstOnPath(t, "testdata/bin")
	code, stdout, stderr := runAgent(t, []string{"PATH=" + os.Getenv("PATH")})
	if code != 75 || stdout != "" || !strings.Contains(stderr, "Not logged in") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 75, nothing, claude's words", code, stdout, stderr)
	}
}

// The stand-in's contract is the real CLI's: where Claude Code's CLI runs
// (.ci/run installs it), it is run without a login, in --bare mode (only
// ANTHROPIC_API_KEY counts, never a keychain) and an empty HOME; it must
// print the result object the stand-in prints, and agent.sh must read it
// as the stand-in's.
func TestRealClaudeWithoutLoginPrintsTheStandInsShape(t *testing.T) {
	exampletest.Need(t, "sh", "jq")
	if _, err := exec.LookPath("claude"); err != nil {
		t.Skip("Claude Code's CLI is not installed (.ci/run installs it)")
	}
	if err := exec.Command("claude", "--version").Run(); err != nil {
		t.Skipf("Claude Code's CLI does not run here: %v", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "claude", "-p", "--output-format", "json", "--no-session-persistence", "--bare")
	cmd.Env, cmd.Stdin = env, strings.NewReader("hi")
	out, _ := cmd.Output()
	var res struct {
		Type    string `json:"type"`
		IsError *bool  `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.Type != "result" || res.IsError == nil || !*res.IsError || res.Result == "" {
		t.Fatalf("claude -p --output-format json without a login printed %q (%v); the stand-in prints {type: result, is_error: true, result: ...}", out, err)
	}
	code, stdout, stderr := runAgent(t, env, "--bare")
	if code != 75 || stdout != "" || !strings.Contains(stderr, res.Result) {
		t.Errorf("agent.sh on the real CLI: exit %d, stdout %q, stderr %q; want 75 and %q", code, stdout, stderr, res.Result)
	}
}

// runAgent runs agent.sh on a payload, in env, with args.
func runAgent(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exampletest.Abs(t, "agent.sh"), args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(`{"message":{"text":"hi"},"history":[{"role":"user","text":"earlier"}]}`)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, o.String(), e.String()
}
