package memory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Loads of one conversation share reads (a Load that finds a read under
// way joins the next one), yet every Load sees every turn whose Record
// returned before the Load began, while other Loads keep reads in flight
// all along.
func TestConcurrentLoadsSeeEveryTurnRecordedBeforeThem(t *testing.T) {
	t.Parallel()
	const rounds, loaders = 30, 16
	w := pipelinetest.New(t, pipelinetest.Options{Topology: events.TopologyConfig{HistoryTurns: 100}})
	ctx := pipelinetest.Ctx(t)
	reader, writer := memoryOn(t, w.Proc(), memory.Config{Turns: 100}), memoryOn(t, w.Proc(), memory.Config{Turns: 100})

	// Background Loads keep a read of the conversation under way.
	bg, stop := context.WithCancel(ctx)
	var busy sync.WaitGroup
	for range 4 {
		busy.Add(1)
		go func() {
			defer busy.Done()
			for bg.Err() == nil {
				_, _ = reader.Load(bg, ws, "canvas")
			}
		}()
	}
	defer func() { stop(); busy.Wait() }()

	for k := range rounds {
		id := fmt.Sprint("a", k)
		if _, err := writer.Record(ctx, ws, "canvas", turn(id, handler.RoleUser, id)); err != nil {
			t.Fatal(err)
		}
		loadConcurrently(t, reader, loaders, func(got []handler.Turn) string {
			if len(got) != k+1 || got[k].ActivityID != id {
				return fmt.Sprintf("round %d: a Load saw %d turns %q", k, len(got), texts(got))
			}
			return ""
		})
	}
}

// loadConcurrently runs n Loads of the canvas conversation at once, each
// handing what it got to check, and fails t with the first error or
// complaint (check's non-empty answer).
func loadConcurrently(t *testing.T, s *memory.Store, n int, check func([]handler.Turn) string) {
	t.Helper()
	ctx := pipelinetest.Ctx(t)
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.Load(ctx, ws, "canvas")
			if err != nil {
				errs <- err.Error()
				return
			}
			if why := check(got); why != "" {
				errs <- why
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
