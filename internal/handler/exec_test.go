//go:build unix

package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// script writes an executable /bin/sh script into a temp dir.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// processGone reports whether pid no longer runs (gone or a zombie
// waiting for its reaper).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond) // polling a PID has no event to wait on
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file holds %q", b)
	}
	return pid
}

func TestExecStdinAndReply(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "stdin.json")
	prog := script(t, `cat > "$OUT"; printf '  reply from %s \n\n' "$GREETING"`)
	h := mustParse(t, "exec:"+prog, handler.Options{Env: []string{"OUT=" + in, "GREETING=agent"}})
	req := newRequest("hello there")
	reply, err := h.Handle(testCtx(t), req)
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if reply != "reply from agent" {
		t.Fatalf("reply = %q", reply)
	}
	b, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var got handler.Payload
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("stdin is not Payload JSON: %v\n%s", err, b)
	}
	if got.Delivery != 2 || !got.Deadline.Equal(req.Deadline) || !reflect.DeepEqual(got.Message, req.Message) {
		t.Fatalf("stdin payload = %+v\nwant message %+v", got, req.Message)
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(b, &keys)
	if _, ok := keys["message"]; !ok || len(keys) != 3 {
		t.Fatalf("stdin keys: %s", b)
	}
}

func TestExecEnvironmentNotInherited(t *testing.T) {
	t.Setenv("MOLECULE_WORKSPACE_TOKEN", "platform-secret")
	t.Setenv("OPENAI_API_KEY", "sk-secret")
	t.Setenv("LANG", "C.UTF-8")
	prog := script(t, `env`)
	h := mustParse(t, "exec:"+prog, handler.Options{Env: []string{"EXTRA=1", "LANG=fr_FR.UTF-8"}})
	out, err := h.Handle(testCtx(t), newRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if strings.Contains(out, "secret") {
		t.Fatalf("a secret reached the program's environment:\n%s", out)
	}
	if env["EXTRA"] != "1" || env["LANG"] != "fr_FR.UTF-8" || env["PATH"] != os.Getenv("PATH") {
		t.Fatalf("environment:\n%s", out)
	}
	for k := range env {
		switch k {
		case "PATH", "HOME", "LANG", "TZ", "EXTRA", "PWD", "SHLVL", "_", "":
		default:
			t.Errorf("unexpected variable %s in the program's environment", k)
		}
	}
}

func TestExecArgsWithoutShell(t *testing.T) {
	prog := script(t, `for a in "$@"; do printf '[%s]\n' "$a"; done`)
	h := mustParse(t, "exec:"+prog+` 'a b' "c \"d\"" e\ f '$HOME' *`, handler.Options{})
	out, err := h.Handle(testCtx(t), newRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	want := "[a b]\n[c \"d\"]\n[e f]\n[$HOME]\n[*]"
	if out != want {
		t.Fatalf("args = %q, want %q", out, want)
	}
}

func TestExecExitCodes(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for _, tt := range []struct {
		code      int
		permanent bool
	}{
		{handler.ExitDataErr, true},
		{handler.ExitTempFail, false},
		{1, false},
		{3, false},
	} {
		t.Run(strconv.Itoa(tt.code), func(t *testing.T) {
			prog := script(t, fmt.Sprintf(`cat >/dev/null; printf '%s' >&2; echo 'LAST-LINE why it failed' >&2; echo partial; exit %d`, long, tt.code))
			_, err := mustParse(t, "exec:"+prog, handler.Options{}).Handle(testCtx(t), newRequest("x"))
			var xe *handler.ExitError
			if !errors.As(err, &xe) {
				t.Fatalf("err = %v, want *ExitError", err)
			}
			if xe.Code != tt.code || errors.Is(err, handler.ErrPermanent) != tt.permanent {
				t.Fatalf("code %d permanent %v: %v", xe.Code, errors.Is(err, handler.ErrPermanent), err)
			}
			if !strings.Contains(err.Error(), "LAST-LINE why it failed") || !strings.Contains(err.Error(), "exit status "+strconv.Itoa(tt.code)) {
				t.Fatalf("error lacks the exit status or stderr tail: %v", err)
			}
			if len(xe.Stderr) > 2048+len("…") || !strings.HasPrefix(xe.Stderr, "…") {
				t.Fatalf("stderr tail is %d bytes: %.60q", len(xe.Stderr), xe.Stderr)
			}
		})
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	prog := script(t, `sleep 60 &
echo $! > "$PIDFILE"
wait`)
	h := mustParse(t, "exec:"+prog, handler.Options{Timeout: time.Second, Env: []string{"PIDFILE=" + pidFile}})
	start := time.Now()
	_, err := h.Handle(testCtx(t), newRequest("x"))
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, handler.ErrPermanent) {
		t.Fatalf("err = %v, want a retryable deadline error", err)
	}
	if elapsed > 5*time.Second {
		t.Fatalf("Handle returned after %s with a 1s timeout", elapsed)
	}
	waitGone(t, readPID(t, pidFile), 5*time.Second)
	t.Logf("killed after %s: %v", elapsed, err)
}

func TestExecLeftoverDescendantKilledOnExit(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	// The background sleep inherits stdout; without the group kill the
	// call would wait for it.
	prog := script(t, `sleep 60 &
echo $! > "$PIDFILE"
echo done`)
	h := mustParse(t, "exec:"+prog, handler.Options{Env: []string{"PIDFILE=" + pidFile}})
	start := time.Now()
	out, err := h.Handle(testCtx(t), newRequest("x"))
	if err != nil || out != "done" {
		t.Fatalf("Handle = %q, %v", out, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Handle took %s", d)
	}
	waitGone(t, readPID(t, pidFile), 5*time.Second)
}

func TestExecParentCancel(t *testing.T) {
	prog := script(t, `exec sleep 60`)
	h := mustParse(t, "exec:"+prog, handler.Options{ProgressInterval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	req := newRequest("x")
	req.Progress = func() { cancel() } // the first sign of life cancels
	_, err := h.Handle(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestExecReportsProgress(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	prog := script(t, `read word < "$GATE"; echo "got $word"`)
	h := mustParse(t, "exec:"+prog, handler.Options{ProgressInterval: 5 * time.Millisecond, Env: []string{"GATE=" + fifo}})
	var calls atomic.Int32
	released := make(chan struct{})
	req := newRequest("x")
	req.Progress = func() {
		if calls.Add(1) == 3 {
			close(released)
		}
	}
	go func() {
		<-released
		// Let the script finish once three progress calls arrived.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			_, _ = f.WriteString("go\n")
			f.Close()
		}
	}()
	out, err := h.Handle(testCtx(t), req)
	if err != nil || out != "got go" {
		t.Fatalf("Handle = %q, %v", out, err)
	}
	n := calls.Load()
	if n < 3 {
		t.Fatalf("progress called %d times", n)
	}
}

func TestExecOutputLimit(t *testing.T) {
	prog := script(t, `head -c 100000 /dev/zero | tr '\0' 'a'`)
	_, err := mustParse(t, "exec:"+prog, handler.Options{MaxOutputBytes: 1000}).Handle(testCtx(t), newRequest("x"))
	if !errors.Is(err, handler.ErrOutputTooLarge) || !errors.Is(err, handler.ErrPermanent) {
		t.Fatalf("err = %v, want ErrOutputTooLarge", err)
	}
	out, err := mustParse(t, "exec:"+prog, handler.Options{MaxOutputBytes: 100000}).Handle(testCtx(t), newRequest("x"))
	if err != nil || len(out) != 100000 {
		t.Fatalf("at the limit: %d bytes, %v", len(out), err)
	}
}

func TestExecProgramIgnoringStdin(t *testing.T) {
	// A large message and a program that never reads it: the call must
	// not hang on the stdin pipe.
	prog := script(t, `echo ignored`)
	req := newRequest(strings.Repeat("m", 1<<20))
	out, err := mustParse(t, "exec:"+prog, handler.Options{}).Handle(testCtx(t), req)
	if err != nil || out != "ignored" {
		t.Fatalf("Handle = %q, %v", out, err)
	}
}

func TestExecPathLookup(t *testing.T) {
	// "true" without a '/' is looked up in PATH at Parse time.
	out, err := mustParse(t, "exec:true", handler.Options{}).Handle(testCtx(t), newRequest("x"))
	if err != nil || out != "" {
		t.Fatalf("exec:true = %q, %v", out, err)
	}
	notExec := filepath.Join(t.TempDir(), "plain.txt")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"exec:/nonexistent/agent", "exec:no-such-program-9f8e7d", "exec:" + notExec, "exec:" + t.TempDir()} {
		if _, err := handler.Parse(spec, handler.Options{}); !errors.Is(err, handler.ErrInvalidSpec) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidSpec", spec, err)
		}
	}
}
