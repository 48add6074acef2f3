//go:build unix

package handler_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// The end of an exec: program's context (the sender's tasks/cancel, or
// its timeout) sends its process group SIGTERM first: a program that
// traps it cleans up and exits at once; one that ignores it is killed
// with SIGKILL after the grace.
func TestExecCancelSendsTermThenKill(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		trapped    bool
		within     time.Duration
	}{
		{"traps TERM", `trap 'echo term > "$MARK"; exit 0' TERM
echo started > "$READY"
sleep 30 & wait`, true, time.Second},
		{"ignores TERM", `trap '' TERM
echo started > "$READY"
sleep 30 & wait`, false, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			mark, ready := filepath.Join(dir, "mark"), filepath.Join(dir, "ready")
			if err := syscall.Mkfifo(ready, 0o600); err != nil {
				t.Fatal(err)
			}
			h := mustParse(t, "exec:"+script(t, tc.body), handler.Options{Env: []string{"MARK=" + mark, "READY=" + ready}})
			ctx, cancel := context.WithCancel(testCtx(t))
			done := make(chan error, 1)
			go func() { _, err := h.Handle(ctx, newRequest("x")); done <- err }()
			// The program has set its trap once it wrote to the fifo.
			if b, err := os.ReadFile(ready); err != nil || !strings.Contains(string(b), "started") {
				t.Fatalf("the program did not start: %q %v", b, err)
			}
			start := time.Now()
			cancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the program outlived its context by 10 s")
			}
			took := time.Since(start)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want the context's end", err)
			}
			if got := fileHas(mark, "term"); got != tc.trapped {
				t.Errorf("TERM handled: %v, want %v", got, tc.trapped)
			}
			if took > tc.within || !tc.trapped && took < time.Second {
				t.Errorf("stopped %s after the cancel, want within %s (after the grace if TERM is ignored)", took, tc.within)
			}
			t.Logf("%s: stopped %s after the cancel", tc.name, took.Round(time.Millisecond))
		})
	}
}

func fileHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}
