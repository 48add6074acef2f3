package codex_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/exampletest"
)

// The relay runs agent.sh as its exec: handler with OPENAI_API_KEY passed
// by MOLECULE_HANDLER_ENV's OPENAI_* prefix; the stand-in codex (first on
// PATH) writes its last message to the --output-last-message file, and the
// canvas user gets that text.
func TestCodexAnswersThroughRelay(t *testing.T) {
	exampletest.Need(t, "sh", "jq")
	exampletest.StandInFirstOnPath(t, "testdata/bin")
	got := exampletest.Ask(t, []string{
		"MOLECULE_HANDLER=exec:" + exampletest.Abs(t, "agent.sh") + " --model gpt-5-codex --sandbox read-only",
		"MOLECULE_HANDLER_ENV=OPENAI_*",
		"OPENAI_API_KEY=sk-test",
	}, "what is 6 x 7?")
	if want := "stand-in Codex read: what is 6 x 7?"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// Without its key, codex exec fails; agent.sh exits EX_TEMPFAIL and prints
// nothing, so the relay retries and never posts the failure.
func TestCodexWithoutKeyIsAFailureNotAnAnswer(t *testing.T) {
	exampletest.Need(t, "sh", "jq")
	exampletest.StandInFirstOnPath(t, "testdata/bin")
	cmd := exec.Command(exampletest.Abs(t, "agent.sh"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(`{"message":{"text":"hi"}}`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 75 || len(out) != 0 || !strings.Contains(stderr.String(), "401 Unauthorized") {
		t.Errorf("err %v, stdout %q, stderr %q; want exit 75, nothing, codex's words", err, out, stderr.String())
	}
}

// The flags agent.sh gives codex exec are the real CLI's, where it is
// installed (npm install -g @openai/codex).
func TestRealCodexHasTheFlagsAgentUses(t *testing.T) {
	if _, err := exec.LookPath("codex"); err != nil {
		t.Skip("Codex's CLI is not installed")
	}
	help, err := exec.Command("codex", "exec", "--help").CombinedOutput()
	if err != nil {
		t.Skipf("codex exec --help: %v", err)
	}
	for _, flag := range []string{"--skip-git-repo-check", "--ephemeral", "--color", "--output-last-message", "--json", "instructions are read from stdin"} {
		if !strings.Contains(string(help), flag) {
			t.Errorf("codex exec --help lacks %q", flag)
		}
	}
}
