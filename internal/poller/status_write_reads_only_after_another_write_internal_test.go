package poller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A status write goes on the revision this process last wrote, without
// reading the record first (a fleet's heartbeats refresh a thousand
// records a minute); only when another writer came in between does the
// compare-and-set fail, and then the record is read and the other
// writer's change kept.
func TestStatusWriteReadsOnlyAfterAnotherWrite(t *testing.T) {
	ctx, p, reads := statusTestPoller(t)
	const ws = "ws-1"
	set := func(f func(*statusRecord)) {
		t.Helper()
		if _, err := p.updateStatus(ctx, ws, f); err != nil {
			t.Fatal(err)
		}
	}
	set(func(r *statusRecord) { r.Paused = true }) // nothing cached yet: read, then create
	first := reads()
	set(func(r *statusRecord) { r.Paused = false })
	set(func(r *statusRecord) { r.LastPollError = "x" })
	if n := reads() - first; n != 0 {
		t.Fatalf("%d reads for two writes on this process's own last revision, want 0", n)
	}

	// Another writer in between: the write reads the record and keeps
	// the other's change.
	e, err := p.topo.Status.Get(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	var theirs statusRecord
	if err := json.Unmarshal(e.Value(), &theirs); err != nil {
		t.Fatal(err)
	}
	theirs.Generation = "old"
	data, _ := json.Marshal(theirs)
	if _, err := p.topo.Status.Update(ctx, ws, data, e.Revision()); err != nil {
		t.Fatal(err)
	}
	before := reads()
	set(func(r *statusRecord) { r.Paused = true })
	if n := reads() - before; n != 1 {
		t.Errorf("%d reads after another writer's update, want 1", n)
	}
	e, err = p.topo.Status.Get(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	var got statusRecord
	if err := json.Unmarshal(e.Value(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Generation != "old" || !got.Paused || got.LastPollError != "x" {
		t.Errorf("stored record %+v: want the other writer's generation old, paused, and the earlier last_poll_error", got)
	}
}

// statusTestPoller is a Poller with nothing but its topology, on an
// embedded NATS server, a context for the test, and the count of the
// status bucket's reads (countStatusReads).
func statusTestPoller(t *testing.T) (context.Context, *Poller, func() int) {
	t.Helper()
	ctx, ns, _, topo := testTopology(t)
	return ctx, &Poller{topo: topo}, countStatusReads(t, ns, topo)
}

// testTopology is an embedded NATS server with the relay's topology on
// it, and a context for the test.
func testTopology(t *testing.T) (context.Context, *natstest.Server, jetstream.JetStream, *events.Topology) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, ns, js, topo
}

// countStatusReads returns a count of the requests that read a status
// record of topo so far: every read is a request to the bucket's stream
// (a direct get, or a message get where direct gets are off).
func countStatusReads(t *testing.T, ns *natstest.Server, topo *events.Topology) func() int {
	t.Helper()
	return countBucketReads(t, ns, topo.Status.Bucket())
}

// countBucketReads counts the reads of any entry of bucket so far.
func countBucketReads(t *testing.T, ns *natstest.Server, bucket string) func() int {
	t.Helper()
	watch, _ := natstest.Connect(t, ns.ClientURL())
	stream := "KV_" + bucket
	var subs []interface{ Pending() (int, int, error) }
	for _, subj := range []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream} {
		sub, err := watch.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		t.Helper()
		if err := watch.Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range subs {
			m, _, _ := s.Pending()
			n += m
		}
		return n
	}
}
