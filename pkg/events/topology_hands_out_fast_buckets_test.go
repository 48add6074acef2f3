package events_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/jsfast"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The buckets the stages get from EnsureTopology and LookupTopology are
// jsfast's, so that every record's Get, Create and Update skips nats.go's
// per-operation work (docs/performance.md), and they work: a key written
// through one is read back through the other.
func TestTopologyHandsOutFastBuckets(t *testing.T) {
	ctx := ctxT(t)
	_, js := natstest.Connect(t, natstest.Start(t).ClientURL())
	ensured, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	looked, err := events.LookupTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, topo := range []*events.Topology{ensured, looked} {
		for name, kv := range map[string]jetstream.KeyValue{
			"cursors": topo.Cursors, "status": topo.Status, "handled": topo.Handled, "replies": topo.Replies, "asks": topo.Asks,
		} {
			if _, ok := kv.(*jsfast.KV); !ok {
				t.Errorf("%s bucket is %T, not jsfast's", name, kv)
			}
		}
	}
	rev, err := ensured.Handled.Create(ctx, "ws-1.act-1", []byte("done"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := looked.Handled.Get(ctx, "ws-1.act-1")
	if err != nil || e.Revision() != rev || string(e.Value()) != "done" {
		t.Fatalf("read back %v, %v; want revision %d holding done", e, err, rev)
	}
}
