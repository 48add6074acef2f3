package poller

import (
	"encoding/json"
	"testing"
)

// A cycle goes on from the status record this process last read or wrote
// and reads the bucket again only once its copy is statusReadEvery old
// (an idle fleet's safety-net cycles read 8 records a second for
// nothing); another writer's change is taken up at this process's next
// write (its compare-and-set fails and reads) or at that read.
func TestCycleReadsItsStatusRecordOnlyWhenItsCopyIsOld(t *testing.T) {
	ctx, p, reads := statusTestPoller(t)
	const ws = "ws-1"
	if _, err := p.updateStatus(ctx, ws, func(r *statusRecord) { r.Registered = true }); err != nil {
		t.Fatal(err)
	}
	read := func() statusRecord {
		t.Helper()
		r, err := p.readStatus(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	read() // the first read of this process
	before := reads()
	for range 3 {
		if !read().Registered {
			t.Fatal("the copy lost the registration")
		}
	}
	if n := reads() - before; n != 0 {
		t.Fatalf("%d reads by three cycles with a fresh copy, want 0", n)
	}

	// Another writer: taken up by this process's next write.
	theirs := func(f func(*statusRecord)) {
		t.Helper()
		e, err := p.topo.Status.Get(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		var r statusRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			t.Fatal(err)
		}
		f(&r)
		data, _ := json.Marshal(r)
		if _, err := p.topo.Status.Update(ctx, ws, data, e.Revision()); err != nil {
			t.Fatal(err)
		}
	}
	theirs(func(r *statusRecord) { r.Generation = "old" })
	if _, err := p.updateStatus(ctx, ws, func(r *statusRecord) { r.LastPollError = "x" }); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Generation != "old" || got.LastPollError != "x" {
		t.Fatalf("after this process's next write the copy is %+v, want the other's generation and its own error", got)
	}

	// Or by the read once the copy is statusReadEvery old.
	theirs(func(r *statusRecord) { r.DeliveryMode = "push" })
	v, _ := p.statusCache.Load(ws)
	c := *v.(*cachedStatus)
	c.readAt = c.readAt.Add(-statusReadEvery)
	p.statusCache.Store(ws, &c)
	before = reads()
	if got := read(); got.DeliveryMode != "push" {
		t.Fatalf("a copy statusReadEvery old was used: %+v", got)
	}
	if n := reads() - before; n != 1 {
		t.Fatalf("%d reads of an old copy, want 1", n)
	}
}
