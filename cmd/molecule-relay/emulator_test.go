package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildRelay builds the CLI into a temporary directory, as a user's
// `go install` would.
func buildRelay(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "molecule-relay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// lineWaiter collects a child's output lines and waits for one.
type lineWaiter struct {
	lines chan string
	seen  []string
}

func newLineWaiter(r io.Reader) *lineWaiter {
	w := &lineWaiter{lines: make(chan string, 256)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	return w
}

// waitFor returns the first line containing s, among the lines already
// read too (two replies may come in either order), failing the test at the
// deadline or when the output ends.
func (w *lineWaiter) waitFor(t *testing.T, s string, deadline <-chan time.Time) string {
	t.Helper()
	for _, l := range w.seen {
		if strings.Contains(l, s) {
			return l
		}
	}
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				t.Fatalf("output ended before %q; it was:\n%s", s, strings.Join(w.seen, "\n"))
			}
			w.seen = append(w.seen, l)
			if strings.Contains(l, s) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q within the deadline; output so far:\n%s", s, strings.Join(w.seen, "\n"))
		}
	}
}

// readEnvFile reads the `export K=V` lines the emulator writes.
func readEnvFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var environ []string
	for _, l := range strings.Split(string(b), "\n") {
		if kv, ok := strings.CutPrefix(l, "export "); ok {
			environ = append(environ, kv)
		}
	}
	return environ
}

// The emulator, run as a user runs it (its own process), prints an
// environment that `connect` serves as it is, forwards a canvas message
// POSTed to its control endpoint and a peer message typed on its stdin,
// prints both replies, and exits 0 on SIGTERM; its env file is private.
func TestEmulatorServesConnectFromItsPrintedEnvironment(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	envFile := filepath.Join(t.TempDir(), "emulator.env")
	emu := exec.Command(bin, "emulator", "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--env-file", envFile)
	stdin, err := emu.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := emu.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	emu.Stderr = &stderr
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Process.Kill(); _ = emu.Wait() })
	out := newLineWaiter(stdout)
	deadline := time.After(60 * time.Second)

	control := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out.waitFor(t, "/canvas", deadline)), "curl -d 'hello'")), "/canvas")
	out.waitFor(t, "Ctrl-C stops", deadline)
	if fi, err := os.Stat(envFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("env file: %v, mode %v; want 0600 (it holds a token)", err, fi.Mode().Perm())
	}
	environ := append(readEnvFile(t, envFile), "NATS_STORE_DIR="+t.TempDir(), "MOLECULE_LOG_LEVEL=warn")
	if len(environ) != 5 {
		t.Fatalf("env file gives %q, want URL, workspace id and token", environ)
	}

	ctx, cancel := context.WithCancel(context.Background())
	connectDone := make(chan int, 1)
	var connectErr bytes.Buffer
	go func() {
		connectDone <- run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &connectErr, environ: environ}, []string{"connect"})
	}()
	t.Cleanup(func() { cancel(); <-connectDone })

	// 409 until connect has registered the workspace in poll mode.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Post(control+"/canvas", "text/plain", strings.NewReader("hello from curl"))
		if err != nil {
			t.Fatalf("POST %s/canvas: %v", control, err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusConflict {
			t.Fatalf("POST /canvas: %d, want 200 (or 409 before the relay registered)", resp.StatusCode)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("connect never registered; its log:\n%s", connectErr.String())
		}
	}
	if _, err := io.WriteString(stdin, "@peer hello from stdin\n"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "← reply to canvas: echo: hello from curl", deadline)
	out.waitFor(t, ": echo: hello from stdin", deadline)

	if err := emu.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := emu.Wait(); err != nil {
		t.Fatalf("emulator after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// dev stops by itself when its input ends, after the replies to what was
// typed arrived, and prints the agent's token beside its workspace.
func TestDevExitsAfterRepliesWhenStdinEnds(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run(context.Background(), &cliEnv{stdin: strings.NewReader("hello\n@peer hi\n"), stdout: &out, stderr: &errb,
		environ: []string{"MOLECULE_LOG_LEVEL=warn", "NATS_STORE_DIR=" + t.TempDir()}}, []string{"dev", "--demo=false"})
	if code != 0 {
		t.Fatalf("dev: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"agent token ", "← reply to canvas: echo: hello", ": echo: hi"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dev output lacks %q:\n%s", want, out.String())
		}
	}
}
