package poller

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// A cycle reads the stored cursor every time (another poller may have
// moved it), but decodes it only when its revision is not the one this
// process holds: a cursor carries up to maxRecent recent ids, and under a
// burst decoding them every cycle was a few hundred allocations each. A
// value another writer stored is still read and decoded.
func TestCursorReadDecodesOnlyANewRevision(t *testing.T) {
	ctx, p, _ := statusTestPoller(t)
	const ws = "ws-1"
	now := time.Now().UTC()
	v := cursorValue{Cursor: "a-1", CreatedAt: now, UpdatedAt: now, Recent: map[string]int64{}}
	for i := range 500 {
		v.Recent[fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)] = now.UnixMicro()
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.topo.Cursors.Create(ctx, ws, data); err != nil {
		t.Fatal(err)
	}
	first, err := p.loadCursor(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Recent) != 500 || first.Cursor != "a-1" {
		t.Fatalf("first load: cursor %q with %d recent ids, want a-1 with 500", first.Cursor, len(first.Recent))
	}
	var again *cursorEntry
	allocs := testing.AllocsPerRun(20, func() {
		if again, err = p.loadCursor(ctx, ws); err != nil {
			t.Fatal(err)
		}
	})
	if !reflect.DeepEqual(again, first) {
		t.Fatalf("loading the unmoved cursor again gave %+v, want %+v", again, first)
	}
	// A KV read costs a few dozen allocations; a decode of 500 ids, about
	// a thousand more.
	if allocs > 200 {
		t.Errorf("loading an unmoved cursor allocated %.0f times: decoded again?", allocs)
	}

	v.Cursor, v.Recent = "b-2", map[string]int64{"b-2": now.UnixMicro()}
	if data, err = json.Marshal(v); err != nil {
		t.Fatal(err)
	}
	if _, err := p.topo.Cursors.Update(ctx, ws, data, first.Revision); err != nil {
		t.Fatal(err)
	}
	moved, err := p.loadCursor(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Cursor != "b-2" || len(moved.Recent) != 1 || moved.Revision == first.Revision {
		t.Fatalf("after another writer's update: cursor %q, %d recent ids, revision %d; want b-2, 1, a new revision", moved.Cursor, len(moved.Recent), moved.Revision)
	}
}
