package bench_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// stageMemory is a stage's conversation memory as relay.Runtime.Memory
// builds it (MOLECULE_HISTORY_TURNS turns, the default byte bound), nil
// for 0 turns (memory off). It is the one place the benchmark meets
// memory's constructor, so a build of an earlier tree can swap this file.
func stageMemory(t *testing.T, js jetstream.JetStream, topo *events.Topology, turns int) *memory.Store {
	t.Helper()
	m, err := memory.New(js, topo, memory.Config{Turns: turns})
	if err != nil {
		t.Fatalf("memory: %v", err)
	}
	return m
}
