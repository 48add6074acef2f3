package pollgroup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A member killed while it held a workspace that then left the set (it
// was removed from the registry meanwhile) leaves a claim no one takes
// over: the live members delete it once they count its owner dead, so the
// group's bucket holds claims of the set's workspaces only.
func TestDeadMembersClaimOnARemovedWorkspaceIsSwept(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := pollgroup.EnsureBucket(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketPollerGroups)
	if err != nil {
		t.Fatal(err)
	}
	ids := workspaceIDs(2)
	kept, removed := ids[0], ids[1]
	// What a SIGKILLed member leaves: its key, renewed no more, and its claim.
	for k, v := range map[string]string{"g3.m.killed": "killed", "g3.c." + removed: "killed"} {
		if _, err := kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	tr := &tracker{by: map[string]string{}}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pollgroup.Run(runCtx, js, pollgroup.Config{Group: "g3", Instance: "live", Workspaces: []string{kept}, Poll: tr.poll("live"), TTL: time.Second})
	}()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := kv.Get(ctx, "g3.c."+removed)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed member's claim on a workspace out of the set is still there after 10 s (get: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.by[removed] != "" || tr.by[kept] != "live" {
		t.Errorf("polling %v: want only the kept workspace, by the live member", tr.by)
	}
}
