package memory_test

import (
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A Store reads a conversation it read before from the last message it
// holds on: it still sees every turn another process records, drops what
// `history forget` erased (the forget marker), and keeps the stream's
// bound on what it holds.
func TestReadCacheSeesOtherWritersForgetAndTheBound(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Topology: events.TopologyConfig{HistoryTurns: 4}})
	ctx := pipelinetest.Ctx(t)
	reader, writer := memoryOn(t, w.Proc(), memory.Config{Turns: 20}), memoryOn(t, w.Proc(), memory.Config{Turns: 20})
	load, record := canvasOf(t, ctx, reader, writer)
	load()
	record("a1", "one")
	load("user:one")
	record("a2", "two")
	record("a3", "three")
	load("user:one", "user:two", "user:three")
	// The stream keeps 4 messages of a conversation; so does the reader.
	record("a4", "four")
	record("a5", "five")
	load("user:two", "user:three", "user:four", "user:five")

	done, err := memory.Forget(ctx, w.Obs.JS, w.Obs.Topo, ws, "canvas")
	if err != nil || len(done) != 1 {
		t.Fatalf("forget: %q, %v", done, err)
	}
	load()
	record("a6", "six")
	load("user:six")
	if convs, err := memory.Conversations(ctx, w.Obs.JS, w.Obs.Topo, ws); err != nil || !equal(convs, []string{"canvas"}) {
		t.Errorf("conversations %q, %v", convs, err)
	}
	// A conversation forgotten and not written since is not listed,
	// though its subject holds the forget marker.
	if _, err := memory.Forget(ctx, w.Obs.JS, w.Obs.Topo, ws, "canvas"); err != nil {
		t.Fatal(err)
	}
	if convs, err := memory.Conversations(ctx, w.Obs.JS, w.Obs.Topo, ws); err != nil || len(convs) != 0 {
		t.Errorf("after forget: conversations %q, %v", convs, err)
	}
	load()
}
