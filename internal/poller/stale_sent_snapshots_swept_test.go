package poller

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A published-row snapshot written longer than recentKeep ago holds no
// row a re-read could still meet: the sweep deletes it (a removed or
// quiet workspace no longer keeps up to 570 KB in the status bucket for
// ever), keeps the fresh ones and every status record, and the status
// listing never shows a snapshot key as a workspace, before or after.
func TestStaleSentSnapshotsAreSweptAndFreshOnesKept(t *testing.T) {
	ctx, _, _, topo := testTopology(t)
	const removed, live = "0e5c1a2b-0000-4000-8000-000000000001", "0e5c1a2b-0000-4000-8000-000000000002"
	put := func(key string, value []byte) jetstream.KeyValueEntry {
		t.Helper()
		if _, err := topo.Status.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
		e, err := topo.Status.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	rows := []recentID{{id: "6af0b425-9c93-48bf-ac04-a9c98df27fdb", createdAt: time.Now()}}
	put(removed, []byte(`{"removed":true}`))
	stale := put(snapshotKey(removed), encodeSnapshot(rows))
	put(live, []byte(`{"registered":true}`))
	fresh := put(snapshotKey(live), encodeSnapshot(rows))

	listed := func() []string {
		t.Helper()
		st, err := ReadStatus(ctx, topo)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		var ids []string
		for _, w := range st {
			ids = append(ids, w.WorkspaceID)
		}
		return ids
	}
	if ids := listed(); !slices.Equal(ids, []string{removed, live}) {
		t.Errorf("status lists %v before the sweep, want the two workspaces", ids)
	}

	keep := 3 * time.Minute
	// The moment the first snapshot is older than keep and the second not.
	now := stale.Created().Add(keep + fresh.Created().Sub(stale.Created())/2)
	if n, err := sweepSnapshotsBefore(ctx, topo.Status, keep, now); err != nil || n != 1 {
		t.Fatalf("sweep deleted %d (%v), want 1", n, err)
	}
	if _, err := topo.Status.Get(ctx, snapshotKey(removed)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the stale snapshot is still there (%v)", err)
	}
	for _, key := range []string{snapshotKey(live), removed, live} {
		if _, err := topo.Status.Get(ctx, key); err != nil {
			t.Errorf("%s: %v, want it kept", key, err)
		}
	}
	if ids := listed(); !slices.Equal(ids, []string{removed, live}) {
		t.Errorf("status lists %v after the sweep, want the two workspaces", ids)
	}
	if n, err := sweepSnapshotsBefore(ctx, topo.Status, keep, now); err != nil || n != 0 {
		t.Errorf("a second sweep deleted %d (%v), want 0", n, err)
	}
}
