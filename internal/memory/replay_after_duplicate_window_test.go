package memory_test

import (
	"encoding/json"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A record repeated after the stream's duplicate window (an operator's
// replay days later) is stored again, since the server no longer knows
// its Nats-Msg-Id; a read still shows each turn once, in its first place.
func TestTurnRecordedAgainAfterTheDuplicateWindowShowsOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)
	s := memoryOn(t, w.Obs, memory.Config{Turns: 10})
	pair := []handler.Turn{turn("a1", handler.RoleUser, "hi"), turn("a1", handler.RoleAgent, "hello")}
	if _, err := s.Record(ctx, ws, "canvas", pair...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, ws, "canvas", turn("a2", handler.RoleUser, "next")); err != nil {
		t.Fatal(err)
	}
	// The same pair again, as a write past the window lands: no Msg-Id
	// the server still remembers.
	data, err := json.Marshal(pair)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Obs.JS.Publish(ctx, events.MemorySubject(ws, "canvas"), data); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, ws, "canvas")
	if want := []string{"user:hi", "agent:hello", "user:next"}; err != nil || !equal(texts(got), want) {
		t.Errorf("Load = %q, %v; want %q", texts(got), err, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
