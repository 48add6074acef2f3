package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The CI script the GitHub Action and the GitLab example call, run as a
// CI job would (a built binary, the environment, a fresh store each run)
// against the platform double: 0 when everything was answered, 1 when the
// workspace was removed, 2 for a configuration error; the token is never
// printed.
func TestCIScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	bin := filepath.Join(t.TempDir(), "molecule-relay")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("ci-agent")
	job := func(extra ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "../../infra/ci/molecule-relay-once.sh")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOLECULE_RELAY_BIN=" + bin,
			"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
			"NATS_STORE_DIR=" + t.TempDir(), "MOLECULE_RELAY_ARGS=--idle 200ms", "GITHUB_ACTIONS=true"}, extra...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), ws.Token) {
			t.Fatal("the token appears in the job log")
		}
		return code, out.String()
	}
	if code, out := job(); code != 0 {
		t.Fatalf("first job: exit %d\n%s", code, out)
	}
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "from CI"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	ghOutput := filepath.Join(t.TempDir(), "github_output")
	if code, out := job("GITHUB_OUTPUT=" + ghOutput); code != 0 || len(srv.Notifications(ws.ID)) != 1 {
		t.Fatalf("second job: exit %d, %d replies\n%s", code, len(srv.Notifications(ws.ID)), out)
	}
	// The action's outputs.
	if b, err := os.ReadFile(ghOutput); err != nil || string(b) != "handled=1\nreplied=1\ndead-lettered=0\nfailed=0\nexit-code=0\nexit-reason=ok\n" {
		t.Fatalf("GITHUB_OUTPUT: %q, %v; want handled=1, replied=1, dead-lettered=0, failed=0, exit-code=0, exit-reason=ok", b, err)
	}
	// Workspaces on several tenants: MOLECULE_PLATFORM_URLS alone is enough.
	if code, out := job("MOLECULE_PLATFORM_URL=", "MOLECULE_WORKSPACE_ID=", "MOLECULE_WORKSPACE_TOKEN=",
		"MOLECULE_WORKSPACE_IDS="+ws.ID, "MOLECULE_WORKSPACE_TOKENS="+ws.Token, "MOLECULE_PLATFORM_URLS="+srv.URL()); code != 0 {
		t.Fatalf("MOLECULE_PLATFORM_URLS job: exit %d\n%s", code, out)
	}
	if code, out := job("MOLECULE_PLATFORM_URL="); code != 2 || !strings.Contains(out, "MOLECULE_PLATFORM_URL is not set") {
		t.Fatalf("no platform URL: exit %d\n%s", code, out)
	}
	configOutput := filepath.Join(t.TempDir(), "github_output")
	if code, out := job("MOLECULE_POLL_INTERVAL=often", "GITHUB_OUTPUT="+configOutput); code != 2 || !strings.Contains(out, "MOLECULE_POLL_INTERVAL") {
		t.Fatalf("bad config: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(configOutput); err != nil || !strings.Contains(string(b), "exit-code=2\nexit-reason=configuration\n") {
		t.Fatalf("GITHUB_OUTPUT after a configuration error: %q, %v; want exit-code=2, exit-reason=configuration", b, err)
	}
	srv.Delete(ws.ID)
	failedOutput := filepath.Join(t.TempDir(), "github_output")
	code, out := job("GITHUB_OUTPUT=" + failedOutput)
	if code != 1 || !strings.Contains(out, "FAILED workspace "+ws.ID+": removed") || !strings.Contains(out, "::error") {
		t.Fatalf("removed workspace: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(failedOutput); err != nil || !strings.Contains(string(b), "failed=1\nexit-code=1\nexit-reason=removed\n") {
		t.Fatalf("GITHUB_OUTPUT after a failed run: %q, %v; want failed=1, exit-code=1, exit-reason=removed", b, err)
	}
}

// action.yml is a composite action that runs the same script with the
// workspace secrets in its environment.
func TestActionYAML(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../action.yml")
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Inputs map[string]struct{ Required bool }
		Runs   struct {
			Using string
			Steps []struct {
				Run string
				Env map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(data, &a); err != nil {
		t.Fatal(err)
	}
	if a.Runs.Using != "composite" || !a.Inputs["workspace-token"].Required {
		t.Fatalf("action: %+v", a)
	}
	var run *struct {
		Run string
		Env map[string]string
	}
	for i, s := range a.Runs.Steps {
		if strings.Contains(s.Run, "ci/molecule-relay-once.sh") {
			run = &a.Runs.Steps[i]
		}
	}
	if run == nil || run.Env["MOLECULE_WORKSPACE_TOKEN"] != "${{ inputs.workspace-token }}" {
		t.Fatalf("no step runs the script with the token: %+v", a.Runs.Steps)
	}
	// Every action the composite uses is pinned by commit SHA.
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:-\s*)?uses:\s*(\S+)`).FindAllStringSubmatch(string(data), -1) {
		if _, ref, _ := strings.Cut(m[1], "@"); !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(ref) {
			t.Errorf("action.yml uses %s, not pinned by commit SHA", m[1])
		}
	}
	if strings.Contains(string(data), "@latest") {
		t.Error("action.yml installs @latest: the relay version must follow the action's")
	}
	gl, err := os.ReadFile("../../infra/ci/gitlab-ci.example.yml")
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]struct{ Script []string }
	if err := yaml.Unmarshal(gl, &g); err != nil || !strings.Contains(strings.Join(g["molecule-relay"].Script, "\n"), "ci/molecule-relay-once.sh") {
		t.Fatalf("the GitLab example does not run the script (%v)", err)
	}
}
