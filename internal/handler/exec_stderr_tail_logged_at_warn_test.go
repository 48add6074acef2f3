package handler_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// A failed exec: program's stderr tail is logged at warn level, where an
// operator sees why it failed (before, at debug only): its last 20 lines,
// of its last 2 KiB. Only a tail: a program may print what it was given.
func TestExecStderrTailLoggedAtWarn(t *testing.T) {
	prog := script(t, `cat >/dev/null; i=1; while [ $i -le 30 ]; do echo "stderr line $i" >&2; i=$((i+1)); done; exit 1`)
	var logs bytes.Buffer
	req := newRequest("x")
	req.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if _, err := mustParse(t, "exec:"+prog, handler.Options{}).Handle(testCtx(t), req); err == nil {
		t.Fatal("a program exiting 1 succeeded")
	}
	l := logs.String()
	if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "how=\"exit status 1\"") {
		t.Fatalf("no warn line for the failed program:\n%s", l)
	}
	for i, want := range map[int]bool{30: true, 11: true, 10: false, 1: false} {
		line := "stderr line " + strconv.Itoa(i) + `\n`
		if i == 30 {
			line = "stderr line 30\"" // the last, without a newline after it
		}
		if strings.Contains(l, line) != want {
			t.Errorf("stderr line %d in the warn line: %v, want %v\n%s", i, !want, want, l)
		}
	}
}
