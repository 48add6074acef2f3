package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// actionStep is one shell step of action.yml.
type actionStep struct {
	Name, ID, Run string
	Env           map[string]string
}

func actionSteps(t *testing.T) map[string]actionStep {
	t.Helper()
	data, err := os.ReadFile("../../action.yml")
	if err != nil {
		t.Fatal(err)
	}
	var a struct{ Runs struct{ Steps []actionStep } }
	if err := yaml.Unmarshal(data, &a); err != nil {
		t.Fatal(err)
	}
	steps := map[string]actionStep{}
	for _, s := range a.Runs.Steps {
		if s.Run != "" {
			steps[s.ID] = s
		}
	}
	return steps
}

// runStep runs a shell step as the runner would: in workspace (the job's
// working directory, where the run step keeps .molecule-relay/), its env
// with every ${{ expression }} taken from expr (a missing one fails the
// test), GITHUB_ACTION_PATH the repository, and GITHUB_OUTPUT a fresh
// file. It returns the exit code, the outputs and the log.
func runStep(t *testing.T, workspace string, s actionStep, expr map[string]string, base []string) (int, map[string]string, string) {
	t.Helper()
	env := append([]string{}, base...)
	for k, v := range s.Env {
		v = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`).ReplaceAllStringFunc(v, func(m string) string {
			key := strings.TrimSpace(m[3 : len(m)-2])
			val, ok := expr[key]
			if !ok {
				t.Fatalf("step %s: no value for %s", s.ID, key)
			}
			return val
		})
		env = append(env, k+"="+v)
	}
	root, _ := filepath.Abs("../..")
	out := filepath.Join(t.TempDir(), "github_output")
	env = append(env, "GITHUB_ACTION_PATH="+root, "GITHUB_OUTPUT="+out, "GITHUB_ACTIONS=true")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", s.Run)
	cmd.Dir, cmd.Env = workspace, env
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err := cmd.Run()
	t.Logf("step %q: %v", s.Name, time.Since(start).Round(time.Millisecond))
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{}
	if b, err := os.ReadFile(out); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				outputs[k] = v
			}
		}
	}
	return code, outputs, log.String()
}

// git runs git in dir and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// publish writes the release assets of tag as .goreleaser.yaml names
// them (TestReleaseNamesAgree): the archive for this machine holding bin, and checksums.txt.
func publish(t *testing.T, releases, tag, bin string) (archive string) {
	t.Helper()
	dir := filepath.Join(releases, tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive = readGoreleaser(t).cliArchive(t, tag, runtime.GOOS, runtime.GOARCH)
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "molecule-relay", Mode: 0o755, Size: int64(len(exe))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(exe)
	tw.Close()
	gz.Close()
	sum := sha256.Sum256(buf.Bytes())
	if err := os.WriteFile(filepath.Join(dir, archive), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	checksums := fmt.Sprintf("%x  %s\n%x  molecule-relay_other.tar.gz\n", sum, archive, sha256.Sum256(nil))
	if err := os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(checksums), 0o644); err != nil {
		t.Fatal(err)
	}
	return archive
}

// The action at a release tag installs that release's binary, checked
// against its checksums.txt, and refuses a binary that does not match;
// a tag without a release, a branch or a commit is built, its build cached
// under the commit the ref resolves to (a branch's key moves with the
// branch). The run step exposes the JSON report's counts and the exit
// reason as outputs. GitHub's own actions (cache, setup-go) are not run
// here; a git repository and the release assets on file:// stand in for
// github.com.
func TestActionInstallsVerifiedReleaseBinary(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"sh", "git", "curl", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	steps := actionSteps(t)
	workspace := t.TempDir()
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "RUNNER_TOOL_CACHE=" + t.TempDir(), "RUNNER_TEMP=" + t.TempDir()}
	if c := os.Getenv("GOCACHE"); c != "" {
		base = append(base, "GOCACHE="+c)
	}

	// The action's build step, from this checkout, stamps the release.
	buildDir := t.TempDir()
	if code, _, log := runStep(t, workspace, steps["build"], map[string]string{"inputs.version": "", "steps.resolve.outputs.version": "v0.1.0", "steps.resolve.outputs.commit": "", "steps.resolve.outputs.bin-dir": buildDir}, base); code != 0 {
		t.Fatalf("build step: exit %d\n%s", code, log)
	}
	built := filepath.Join(buildDir, "molecule-relay")

	// github.com: the repository (tags v0.1.0, with a release, and v0.2.0,
	// without; branch main) and its releases.
	server := t.TempDir()
	repo := filepath.Join(server, "molecule-ai", "molecule-relay")
	git(t, server, "init", "-q", "-b", "main", repo)
	git(t, repo, "commit", "-q", "--allow-empty", "-m", "one")
	tagged := git(t, repo, "rev-parse", "HEAD")
	git(t, repo, "tag", "-a", "-m", "v0.1.0", "v0.1.0")
	git(t, repo, "tag", "-a", "-m", "v0.2.0", "v0.2.0")
	releases := filepath.Join(repo, "releases", "download")
	archive := publish(t, releases, "v0.1.0", built)

	resolve := func(ref string) map[string]string {
		t.Helper()
		code, out, log := runStep(t, workspace, steps["resolve"], map[string]string{"inputs.version": "", "github.action_ref": ref,
			"github.action_repository": "molecule-ai/molecule-relay", "github.server_url": "file://" + server}, base)
		if code != 0 {
			t.Fatalf("resolve %s: exit %d\n%s", ref, code, log)
		}
		return out
	}
	install := func(res map[string]string) (int, map[string]string, string) {
		t.Helper()
		return runStep(t, workspace, steps["release"], map[string]string{"steps.resolve.outputs.version": res["version"],
			"steps.resolve.outputs.bin-dir": res["bin-dir"], "steps.resolve.outputs.releases": res["releases"]}, base)
	}

	rel := resolve("v0.1.0")
	if rel["version"] != "v0.1.0" || rel["commit"] != tagged || rel["releases"] != "file://"+releases {
		t.Fatalf("resolve v0.1.0: %v; want the tag's commit %s", rel, tagged)
	}
	code, out, log := install(rel)
	bin := filepath.Join(rel["bin-dir"], "molecule-relay")
	if code != 0 || out["installed"] != "true" {
		t.Fatalf("install v0.1.0: exit %d, outputs %v\n%s", code, out, log)
	}
	if v, err := exec.Command(bin, "--version").Output(); err != nil || !strings.Contains(string(v), "v0.1.0") {
		t.Fatalf("installed binary: %q, %v", v, err)
	}

	// The run step against the double: the outputs come from the report.
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("action")
	run := func() (int, map[string]string, string) {
		t.Helper()
		return runStep(t, workspace, steps["run"], map[string]string{
			"inputs.platform-url": srv.URL(), "inputs.workspace-id": ws.ID, "inputs.workspace-token": ws.Token,
			"inputs.org-id": "", "inputs.handler": "echo", "inputs.handler-answer": "text", "inputs.nats-url": "",
			"steps.resolve.outputs.bin-dir": rel["bin-dir"], "inputs.args": "--idle 200ms",
		}, base)
	}
	if code, out, log := run(); code != 0 || out["exit-reason"] != "ok" {
		t.Fatalf("first run: exit %d, outputs %v\n%s", code, out, log)
	}
	if _, err := os.Stat(filepath.Join(workspace, ".molecule-relay", "nats")); err != nil {
		t.Fatalf("the run step keeps no store in the job's directory: %v", err)
	}
	for _, text := range []string{"one", "two"} {
		if code, _, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code != 200 {
			t.Fatalf("send: %d %v", code, err)
		}
	}
	want := map[string]string{"handled": "2", "replied": "2", "dead-lettered": "0", "failed": "0", "exit-code": "0", "exit-reason": "ok"}
	if code, out, log := run(); code != 0 || fmt.Sprint(out) != fmt.Sprint(want) || len(srv.Notifications(ws.ID)) != 2 {
		t.Fatalf("second run: exit %d, outputs %v, want %v\n%s", code, out, want, log)
	}
	srv.Pause(ws.ID)
	if code, out, log := run(); code != 1 || out["exit-reason"] != "paused" || out["failed"] != "1" || out["exit-code"] != "1" ||
		!strings.Contains(log, "FAILED workspace "+ws.ID+": paused") {
		t.Fatalf("paused: exit %d, outputs %v\n%s", code, out, log)
	}

	// A binary that does not match checksums.txt is refused, not installed.
	if err := os.WriteFile(filepath.Join(releases, "v0.1.0", archive), []byte("not the release"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel["bin-dir"] = t.TempDir()
	if code, out, log := install(rel); code != 1 || out["installed"] == "true" || !strings.Contains(log, "not installed") {
		t.Fatalf("tampered archive: exit %d, outputs %v\n%s", code, out, log)
	}
	if _, err := os.Stat(filepath.Join(rel["bin-dir"], "molecule-relay")); err == nil {
		t.Fatal("a tampered binary was installed")
	}

	// A tag without a release falls through to the build.
	if code, out, log := install(resolve("v0.2.0")); code != 0 || out["installed"] == "true" {
		t.Fatalf("v0.2.0 (no release): exit %d, outputs %v\n%s", code, out, log)
	}

	// A branch is keyed by its commit: a new commit is a new build.
	if got := resolve("main")["commit"]; got != tagged {
		t.Fatalf("main resolves to %s, want %s", got, tagged)
	}
	git(t, repo, "commit", "-q", "--allow-empty", "-m", "two")
	if got, head := resolve("main")["commit"], git(t, repo, "rev-parse", "HEAD"); got != head || got == tagged {
		t.Fatalf("main after a commit resolves to %s, want %s", got, head)
	}
}
