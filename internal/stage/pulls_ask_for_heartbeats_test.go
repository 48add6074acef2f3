package stage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Every pull asks the server for idle heartbeats (two fifths of its wait),
// so that a pull sent to a consumer leader that died fails after two
// missed heartbeats instead of at its expiry plus a second, and the next
// pull reaches the new leader that much sooner.
func TestPullsAskForIdleHeartbeats(t *testing.T) {
	e := newEnv(t, events.TopologyConfig{})
	// A second subscriber on the pull subject, beside the consumer's own:
	// it sees each pull request as the server does.
	nc := e.js.Conn()
	reqs := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT."+events.StreamInbound+"."+events.ConsumerDispatcher, reqs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r := e.runner(t, stage.Config{FetchWait: time.Second}, nil, func(context.Context, *stage.Delivery) {})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	select {
	case m := <-reqs:
		var req struct {
			Expires   time.Duration `json:"expires"`
			Heartbeat time.Duration `json:"idle_heartbeat"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("pull request %q: %v", m.Data, err)
		}
		if req.Heartbeat != 400*time.Millisecond || req.Expires != time.Second {
			t.Errorf("pull request asks for idle heartbeat %s with expiry %s, want 400ms with 1s: %s", req.Heartbeat, req.Expires, m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pull request seen")
	}
}
