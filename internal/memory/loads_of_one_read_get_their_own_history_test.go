package memory_test

import (
	"fmt"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// The Loads that share a read share the work of turning its records into
// turns, but each gets its own history: a handler that changes its copy
// changes no other handler's, nor what later Loads return. (Run with
// -race: without the copy, the concurrent Loads below write and read one
// slice.)
func TestLoadsOfOneReadEachGetTheirOwnHistory(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)
	store := memoryOn(t, w.Proc(), memory.Config{Turns: 10})
	if _, err := store.Record(ctx, ws, "canvas", turn("a1", handler.RoleUser, "hello"), turn("a1", handler.RoleAgent, "hi")); err != nil {
		t.Fatal(err)
	}
	loadConcurrently(t, store, 32, func(got []handler.Turn) string {
		if len(got) != 2 || got[0].Text != "hello" || got[1].Text != "hi" {
			return fmt.Sprintf("a Load saw %q", texts(got))
		}
		got[0].Text, got[1] = "changed by its handler", handler.Turn{}
		return ""
	})
	got, err := store.Load(ctx, ws, "canvas")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Text != "hello" || got[1].Text != "hi" {
		t.Fatalf("a Load after the handlers changed theirs saw %q", texts(got))
	}
}
