package memory_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

const ws = "35637291-d55e-4553-896c-13c2e02fe4f7"

func turn(activity, role, text string) handler.Turn {
	return handler.Turn{ActivityID: activity, Role: role, Text: text}
}

func TestRecordSkipsTurnsItAlreadyHolds(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	s := memoryOn(t, w.Obs, memory.Config{Turns: 10})
	ctx := pipelinetest.Ctx(t)
	pair := []handler.Turn{turn("a1", handler.RoleUser, "hi"), turn("a1", handler.RoleAgent, "hello")}
	for i, want := range []int{2, 0, 0} {
		if added, err := s.Record(ctx, ws, "canvas", pair...); err != nil || added != want {
			t.Fatalf("record %d: added %d, %v; want %d", i+1, added, err, want)
		}
	}
	// The user turn alone (a no-reply completion of the same message) is
	// another record, but a read shows each turn once.
	if _, err := s.Record(ctx, ws, "canvas", pair[0]); err != nil {
		t.Fatalf("user turn again: %v", err)
	}
	if got, _ := s.Load(ctx, ws, "canvas"); len(got) != 2 {
		t.Fatalf("stored %d turns, want 2: %+v", len(got), got)
	}
}

// Two processes appending to one conversation at once: every append is its
// own message, so every turn is kept.
func TestConcurrentWritersLoseNoTurn(t *testing.T) {
	t.Parallel()
	const each = 15
	w := pipelinetest.New(t, pipelinetest.Options{Topology: events.TopologyConfig{HistoryTurns: 100}})
	stores := []*memory.Store{memoryOn(t, w.Proc(), memory.Config{Turns: 100}), memoryOn(t, w.Proc(), memory.Config{Turns: 100})}
	ctx := pipelinetest.Ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for p, s := range stores {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Record(ctx, ws, "canvas", turn(fmt.Sprintf("p%d-%d", p, i), handler.RoleUser, "x")); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("record: %v", err)
	}
	got, err := stores[0].Load(ctx, ws, "canvas")
	if err != nil || len(got) != 2*each {
		t.Fatalf("stored %d turns (%v), want %d", len(got), err, 2*each)
	}
}

func TestBoundsKeepNewestTurnsWithinBytes(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)

	byTurns := memoryOn(t, w.Obs, memory.Config{Turns: 5})
	for i := range 8 {
		if _, err := byTurns.Record(ctx, ws, "turns", turn(fmt.Sprint(i), handler.RoleUser, fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := byTurns.Load(ctx, ws, "turns")
	if len(got) != 5 || got[0].Text != "m3" || got[4].Text != "m7" {
		t.Errorf("turn bound: kept %q, want m3..m7", texts(got))
	}

	byBytes := memoryOn(t, w.Obs, memory.Config{Turns: 100, MaxBytes: 1024})
	for i := range 10 {
		if _, err := byBytes.Record(ctx, ws, "bytes", turn(fmt.Sprint(i), handler.RoleUser, strings.Repeat(fmt.Sprint(i), 200))); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = byBytes.Load(ctx, ws, "bytes")
	encoded, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(encoded) > 1024 || len(got) < 3 || got[len(got)-1].ActivityID != "9" {
		t.Errorf("byte bound: %d bytes with %d turns ending at %q; want <= 1024 bytes, the newest kept", len(encoded), len(got), got[len(got)-1].ActivityID)
	}

	// One huge turn is cut to MaxBytes/4 on a rune boundary, marked.
	if _, err := byBytes.Record(ctx, ws, "huge", turn("h", handler.RoleAgent, strings.Repeat("é", 5000))); err != nil {
		t.Fatal(err)
	}
	got, _ = byBytes.Load(ctx, ws, "huge")
	if len(got) != 1 || len(got[0].Text) > 256 || !strings.HasSuffix(got[0].Text, memory.TruncatedMark) || !utf8.ValidString(got[0].Text) {
		t.Errorf("huge turn stored as %d bytes %q", len(got[0].Text), got[0].Text)
	}
}

func TestNewRefusesBadConfigAndTurnsZeroIsOff(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	if s, err := memory.New(w.Obs.JS, w.Obs.Topo, memory.Config{}); s != nil || err != nil || s.On() {
		t.Errorf("turns 0: store %v, %v; want nil (off)", s, err)
	}
	for _, cfg := range []memory.Config{{Turns: -1}, {Turns: 5, MaxBytes: 100}} {
		if _, err := memory.New(w.Obs.JS, w.Obs.Topo, cfg); !errors.Is(err, memory.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := memory.New(w.Obs.JS, &events.Topology{}, memory.Config{Turns: 5}); !errors.Is(err, memory.ErrInvalidConfig) {
		t.Errorf("no bucket: %v, want ErrInvalidConfig", err)
	}
	var off *memory.Store
	if turns, err := off.Load(pipelinetest.Ctx(t), ws, "canvas"); turns != nil || err != nil {
		t.Errorf("off Load = %v, %v", turns, err)
	}
}

func TestClipCutsAsStoredTurnsAreCut(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	s := memoryOn(t, w.Obs, memory.Config{Turns: 5, MaxBytes: 4096})
	long := strings.Repeat("x", 5000)
	if got := s.Clip(long); len(got) > 1024 || !strings.HasSuffix(got, memory.TruncatedMark) {
		t.Errorf("Clip of 5000 bytes gave %d bytes", len(got))
	}
	if got := s.Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
}
