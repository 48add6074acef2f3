package relay_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Guarantee 6: relay.Runtime assembled from configuration (the platform
// double's URL, one workspace, the echo handler, an external NATS by
// NATS_URL). Once polls, handles and replies, and reports OK; Run serves
// until its context is cancelled and then returns nil.
func TestE2ERuntimeOnceAndRun(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID="+w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"MOLECULE_HANDLER=echo",
		"MOLECULE_POLL_INTERVAL=10s", // Run must get the messages from SSE wake-ups
		"NATS_URL="+w.NATSURL(),
	)
	if rt.Conn.Embedded() {
		t.Fatal("Open started an embedded NATS server although NATS_URL was set")
	}

	// The first one-shot registers the workspace and seeds its cursor.
	rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("first Once: %v %+v", err, rep)
	}
	if w.Plat.Status(w.Agent.ID).DeliveryMode != "poll" {
		t.Fatal("Once did not register the workspace in poll mode")
	}

	const n = 6
	w.SendMixed("once", n)
	rep, err = rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("second Once: %v %+v", err, rep)
	}
	if rep.Poll == nil {
		t.Fatal("second Once: no poll result")
	}
	if rep.Poll.Published() != n || rep.Handled != n || rep.Replied != n {
		t.Errorf("second Once: published %d, handled %d, replied %d; want %d each", rep.Poll.Published(), rep.Handled, rep.Replied, n)
	}
	if got := w.Replies(); got != n {
		t.Fatalf("%d replies after Once, want %d", got, n)
	}
	w.CheckExactlyOnce(t, w.Sent())

	// Long-running: the same runtime serves new messages until cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx, relay.All) }()
	pipelinetest.Eventually(t, 10*time.Second, "the poller's event stream", func() bool {
		return w.Requests("GET", "/workspaces/"+w.Agent.ID+"/events/stream", 0) > 0
	})
	w.SendMixed("run", n)
	// Well inside the 10 s poll interval: SSE wake-ups (on by default).
	w.WaitReplies(2*n, 8*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its cancel")
	}
	w.CheckExactlyOnce(t, w.Sent())
}

// openRelay loads and validates the configuration of environ (platform and
// handler required) and opens a Runtime on it, closed when the test ends.
func openRelay(t *testing.T, log *slog.Logger, environ ...string) *relay.Runtime {
	t.Helper()
	cfg, err := config.Load(nil, environ)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform | config.NeedHandler)
	}
	if err != nil {
		t.Fatal(err)
	}
	rt, err := relay.Open(pipelinetest.Ctx(t), cfg, log)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}
