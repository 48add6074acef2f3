package kvlease_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// A renewal the server applied but whose reply timed out (a loaded
// server; seen at 10,000 workspaces in a poller group) leaves the key at a
// revision the holder does not know, still naming it: the holder keeps its
// lease. A key that names another instance is a takeover: Lost.
func TestRenewalAppliedButUnansweredKeepsTheLease(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 400 * time.Millisecond
	cfg := kvlease.Config{Bucket: "test_leases", Instance: "first", TTL: ttl}
	held, err := kvlease.Acquire(ctx, js, []string{"k1"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	kv, err := js.KeyValue(ctx, "test_leases")
	if err != nil {
		t.Fatal(err)
	}
	write := func(instance string) {
		b, _ := json.Marshal(map[string]any{"instance": instance, "expires": time.Now().Add(ttl).UTC()})
		if _, err := kv.Put(ctx, "k1", b); err != nil {
			t.Fatal(err)
		}
	}

	write("first") // as the unanswered renewal left it
	select {
	case <-held.Lost():
		t.Fatal("lease lost after a renewal of its own that the holder did not see answered")
	case <-time.After(4 * ttl):
	}

	write("second")
	select {
	case <-held.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not lost 10 s after another instance took its key")
	}
}
