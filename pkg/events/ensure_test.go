package events_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// streamUpdates counts the server's stream-updated advisories by stream.
func streamUpdates(t *testing.T, nc *nats.Conn) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		seen[m.Subject[strings.LastIndex(m.Subject, ".")+1:]]++
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() map[string]int {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range seen {
			out[k] = v
		}
		return out
	}
}

// A stage that starts against the topology as it should be changes
// nothing: no stream or consumer is updated (an update rewrites the stream's store
// while other stages may be creating consumers on it). A changed setting
// is still applied, to the streams it concerns.
func TestEnsureTopologyUpdatesOnlyWhatChanged(t *testing.T) {
	ctx := ctxT(t)
	s := natstest.Start(t)
	nc, js := natstest.Connect(t, s.ClientURL())
	if _, err := events.EnsureTopology(ctx, js, events.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	updates := streamUpdates(t, nc)
	// A consumer create or update request is seen by any subscriber of its
	// API subject, beside the server.
	consumerWrites, err := nc.SubscribeSync("$JS.API.CONSUMER.CREATE.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = consumerWrites.Unsubscribe() }()

	if _, err := events.EnsureTopology(ctx, js, events.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := updates(); len(got) != 0 {
		t.Fatalf("ensuring an unchanged topology updated streams %v", got)
	}
	if n, _, _ := consumerWrites.Pending(); n != 0 {
		t.Fatalf("ensuring an unchanged topology sent %d consumer create/update requests", n)
	}

	top, err := events.EnsureTopology(ctx, js, events.TopologyConfig{DuplicateWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pipelinetest.Eventually(t, 10*time.Second, "the stream-updated advisories", func() bool {
		got := updates()
		return got[events.StreamInbound] == 1 && got[events.StreamReply] == 1
	})
	if d := top.Inbound.CachedInfo().Config.Duplicates; d != time.Hour {
		t.Fatalf("inbound duplicate window %s after ensure, want 1h", d)
	}
}
