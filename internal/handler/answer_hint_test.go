//go:build unix

package handler_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// An exec: program that prints a structured answer without
// MOLECULE_HANDLER_ANSWER=json gets its output posted as text, as
// configured, and one warning naming the setting to change.
func TestExecTextModeNamesTheSettingForAStructuredAnswerOnce(t *testing.T) {
	prog := script(t, `printf '%s' "$ANSWER"`)
	h := mustParse(t, "exec:"+prog, handler.Options{Env: []string{"ANSWER=" + answerBody}})
	var logs bytes.Buffer
	for range 2 {
		req := newRequest("x")
		req.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		if got, err := answerOf(t, h, req); err != nil || got.Text != answerBody {
			t.Fatalf("text mode Answer = %+v, %v; want the output as text", got, err)
		}
	}
	if n := strings.Count(logs.String(), "MOLECULE_HANDLER_ANSWER=json"); n != 1 {
		t.Fatalf("warning logged %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "see attached") {
		t.Fatalf("the warning carries the answer's text:\n%s", logs.String())
	}

	// Plain text, or JSON of another shape, is no structured answer.
	logs.Reset()
	for _, out := range []string{"hello", `{"result": 42}`} {
		h := mustParse(t, "exec:"+prog, handler.Options{Env: []string{"ANSWER=" + out}})
		req := newRequest("x")
		req.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		if _, err := answerOf(t, h, req); err != nil {
			t.Fatal(err)
		}
	}
	if logs.Len() != 0 {
		t.Fatalf("warned on plain output:\n%s", logs.String())
	}
}
