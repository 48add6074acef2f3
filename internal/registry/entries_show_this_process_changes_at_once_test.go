package registry_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// TestEntriesShowThisProcessChangesAtOnce: Entries (the watch's view, the
// console's list) is what List reads from the bucket, and a change this
// process makes is in it as soon as the call returns: an add, a pause and
// a removal, each read back at once.
func TestEntriesShowThisProcessChangesAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := natstest.Start(t)
	k, _ := newKey(t)
	r := open(t, srv.ClientURL(), k)
	for i := range 50 {
		if err := r.Put(ctx, registry.Entry{ID: fmt.Sprintf("ws-%02d", i), Token: fmt.Sprintf("token-%02d-secret", i), PlatformURL: "http://p"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Start(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	ids := func(es []registry.Entry) []string {
		out := []string{}
		for _, e := range es {
			out = append(out, fmt.Sprintf("%s paused=%v", e.ID, e.Paused))
		}
		return out
	}
	same := func(step string) {
		t.Helper()
		got := ids(r.Entries()) // first: List's round trips would give the watch time
		all, err := r.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := ids(all); !slices.Equal(got, want) {
			t.Fatalf("%s: Entries %v\nList %v", step, got, want)
		}
	}
	same("start")
	if n, err := r.Seed(ctx, []registry.Entry{{ID: "ws-new", Token: "token-new-secret", PlatformURL: "http://p"}}); err != nil || n != 1 {
		t.Fatalf("seed: %d, %v", n, err)
	}
	same("after an add")
	if err := r.SetPaused(ctx, "ws-07", true); err != nil {
		t.Fatal(err)
	}
	same("after a pause")
	if err := r.Remove(ctx, "ws-08"); err != nil {
		t.Fatal(err)
	}
	same("after a removal")
	if len(r.Entries()) != 50 {
		t.Fatalf("%d entries, want 50 (50 + 1 added - 1 removed)", len(r.Entries()))
	}
}
