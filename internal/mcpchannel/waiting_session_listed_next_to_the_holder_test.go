package mcpchannel_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A session that waits for another's channel on a shared NATS lists
// itself in the lease bucket next to the lease (the console's MCP view
// shows which holds, which waits), renewed with an expiry; once it takes
// the channel over, its waiting entry is gone.
func TestWaitingSessionListedNextToTheHolder(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	first, err := newRelay(t, w, mcpchannel.LeaseConfig{Instance: "first"})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe() // the waiting session's client, which says nothing
	t.Cleanup(func() { _ = inW.Close() })
	ctx, cancel := context.WithCancel(pipelinetest.Ctx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- mcpchannel.Run(ctx, mcpchannel.Options{
			Open: func(ctx context.Context) (*relay.Runtime, func(), error) {
				rt, err := relay.Open(ctx, mcpConfig(t, w), pipelinetest.Logger())
				if err != nil {
					return nil, nil, err
				}
				return rt, rt.Close, nil
			},
			Workspaces: []string{w.Agent.ID}, Lease: mcpchannel.LeaseConfig{Instance: "second"},
		}, inR, io.Discard)
	}()

	kv, err := w.Obs.JS.KeyValue(ctx, events.BucketMCPLeases)
	if err != nil {
		t.Fatal(err)
	}
	key := kvlease.WaitingKey(w.Agent.ID, "second")
	var v kvlease.Waiting
	pipelinetest.Eventually(t, 10*time.Second, "the second session listed as waiting", func() bool {
		e, err := kv.Get(ctx, key)
		return err == nil && json.Unmarshal(e.Value(), &v) == nil
	})
	if ws, inst, ok := kvlease.ParseWaitingKey(key); !ok || ws != w.Agent.ID || inst != "second" {
		t.Errorf("ParseWaitingKey(%q) = %q, %q, %v", key, ws, inst, ok)
	}
	if v.Instance != "second" || v.PID == 0 || v.Since.IsZero() || !v.Expires.After(time.Now()) {
		t.Errorf("waiting entry %+v: want the instance, its pid, since when, and an expiry to come", v)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	pipelinetest.Eventually(t, 15*time.Second, "the second session holding the lease, no longer waiting", func() bool {
		e, err := kv.Get(ctx, w.Agent.ID)
		if err != nil {
			return false
		}
		var lease struct{ Instance string }
		_, werr := kv.Get(ctx, key)
		return json.Unmarshal(e.Value(), &lease) == nil && lease.Instance == "second" && werr != nil
	})
	_ = inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end with its client")
	}
}
