package registry_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// TestRunningRegistryFollowsARotatedKey: a relay's registry, started with
// key A from a file, keeps what it read through `rotate-key` to B; an
// entry added with B stays unopened (not polled, not a wrong token) until
// the file holds B, and then opens within a retry, with no restart; later
// changes sealed with B open at once.
func TestRunningRegistryFollowsARotatedKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := natstest.Start(t)
	keyA, sA := newKey(t)
	keyB, sB := newKey(t)
	file := filepath.Join(t.TempDir(), "registry.key")
	writeKey := func(s string) {
		if err := os.WriteFile(file+".new", []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil { // as an operator's tooling swaps it
			t.Fatal(err)
		}
	}
	writeKey(sA)
	admin := open(t, srv.ClientURL(), keyA)
	if err := admin.Put(ctx, registry.Entry{ID: wsA, Token: tokA, PlatformURL: "http://a"}); err != nil {
		t.Fatal(err)
	}

	relay := open(t, srv.ClientURL(), keyA)
	relay.FollowKey(func(context.Context) (*registry.Key, error) { return registry.LoadKey(file, "") })
	registry.SetKeyRetry(relay, 50*time.Millisecond)
	if err := relay.Start(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}

	if n, err := admin.Rotate(ctx, keyB); err != nil || n != 1 {
		t.Fatalf("rotate: %d, %v", n, err)
	}
	if err := admin.Put(ctx, registry.Entry{ID: wsB, Token: tokB, PlatformURL: "http://b"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // six retries with the file still holding A
	if e, _ := relay.Lookup(wsA); e.Token != tokA {
		t.Fatalf("after the rotation the relay's %s has token %q; want the one it read, %q", wsA, e.Token, tokA)
	}
	if _, ok := relay.Lookup(wsB); ok || relay.Active(wsB) {
		t.Fatalf("%s, sealed with a key the relay has not read, is known to it", wsB)
	}

	writeKey(sB)
	waitFor(t, 2*time.Second, func() bool {
		e, _ := relay.Lookup(wsB)
		return e.Token == tokB && slices.Contains(relay.Current(), wsB)
	})
	if err := admin.Put(ctx, registry.Entry{ID: wsA, Token: tokA + "-2", PlatformURL: "http://a"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, func() bool { e, _ := relay.Lookup(wsA); return e.Token == tokA+"-2" })
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s", d)
		}
	}
}
