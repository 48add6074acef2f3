package stage_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// TestMessageLoggerLogsLikeWith pins that the deferred With of
// MessageLogger writes exactly what log.With writes, at the same levels,
// also through a further With and WithGroup.
func TestMessageLoggerLogsLikeWith(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var eager, lazy bytes.Buffer
		newLog := func(w *bytes.Buffer) *slog.Logger {
			opts := &slog.HandlerOptions{Level: slog.LevelInfo}
			if format == "json" {
				return slog.New(slog.NewJSONHandler(w, opts)).With("stage", "dispatcher")
			}
			return slog.New(slog.NewTextHandler(w, opts)).With("stage", "dispatcher")
		}
		e := newLog(&eager).With("workspace", "ws-1", "activity", "a 1", "delivery", uint64(2))
		l := stage.MessageLogger(newLog(&lazy), slog.String("workspace", "ws-1"), slog.String("activity", "a 1"), slog.Uint64("delivery", 2))
		for _, log := range []*slog.Logger{e, l} {
			log.Debug("not written", "text", "secret")
			log.Info("one", "n", 1)
			log.With("trace_id", "t").Warn("two")
			log.WithGroup("g").Error("three", "k", "v")
			if log.Enabled(t.Context(), slog.LevelDebug) || !log.Enabled(t.Context(), slog.LevelInfo) {
				t.Errorf("%s: levels differ from the base logger's", format)
			}
		}
		times := regexp.MustCompile(`time=\S+ |"time":"[^"]*",`)
		got, want := times.ReplaceAllString(lazy.String(), ""), times.ReplaceAllString(eager.String(), "")
		if got != want || bytes.Contains(lazy.Bytes(), []byte("secret")) {
			t.Errorf("%s: MessageLogger wrote\n%s\nlog.With wrote\n%s", format, got, want)
		}
	}
}

// TestMessageLoggerAllocatesLittle pins the point of MessageLogger: a
// message that logs nothing at the enabled level pays for no formatting.
func TestMessageLoggerAllocatesLittle(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)).With("stage", "replier")
	n := testing.AllocsPerRun(100, func() {
		l := stage.MessageLogger(log, slog.String("workspace", "ws"), slog.String("activity", "a"), slog.Uint64("delivery", 1))
		l.Debug("not written")
	})
	if n > 2 {
		t.Errorf("MessageLogger with nothing logged: %v allocations, want <= 2 (handler and logger)", n)
	}
}
