package events_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The memory stream bounds each conversation by HistoryTurns messages and
// HistoryTTL, answers batched direct gets (also when replicated: reads of
// memory decide no write), and its bound is only ever raised: stages
// started with different MOLECULE_HISTORY_TURNS do not update it back and
// forth, and none drops turns another still shows. The history bucket of
// earlier versions is no longer created.
func TestMemoryStreamBoundsConversationsAndIsOnlyRaised(t *testing.T) {
	ctx := ctxT(t)
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.ClientURL())

	top, err := events.EnsureTopology(ctx, js, events.TopologyConfig{HistoryTurns: 50, HistoryTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg := top.Memory.CachedInfo().Config
	if cfg.MaxMsgsPerSubject != 50 || cfg.MaxAge != time.Hour || cfg.Duplicates != time.Hour || !cfg.AllowDirect || cfg.Discard != jetstream.DiscardOld {
		t.Errorf("memory stream: per subject %d, max age %s, duplicates %s, direct %v, discard %v",
			cfg.MaxMsgsPerSubject, cfg.MaxAge, cfg.Duplicates, cfg.AllowDirect, cfg.Discard)
	}
	if top.History != nil {
		t.Error("EnsureTopology bound a history bucket nobody created")
	}
	if _, err := js.KeyValue(ctx, events.BucketHistory); err == nil {
		t.Error("EnsureTopology created the old history bucket")
	}
	if replicated := events.MemoryStreamConfig(events.TopologyConfig{Replicas: 3, HistoryTurns: 20}); !replicated.AllowDirect {
		t.Error("a replicated memory stream refuses direct gets, the only batched read")
	}

	for _, turns := range []int{20, 80} {
		top, err := events.EnsureTopology(ctx, js, events.TopologyConfig{HistoryTurns: turns, HistoryTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(max(turns, 50)); top.Memory.CachedInfo().Config.MaxMsgsPerSubject != want {
			t.Errorf("HistoryTurns %d: per subject %d, want %d", turns, top.Memory.CachedInfo().Config.MaxMsgsPerSubject, want)
		}
	}
}
