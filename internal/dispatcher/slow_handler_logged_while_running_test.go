package dispatcher_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A handler running past LogSlowHandler is logged while it runs, again at
// every further LogSlowHandler, with its message's ids and how long it has
// run: a hung handler is seen before its timeout (5 minutes by default),
// where before nothing was logged.
func TestSlowHandlerLoggedWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	in := inbound(1)
	e.publish(t, in)
	var logs capturedLog
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, _ *handler.Request) (string, error) {
		select {
		case <-release:
			return "done at last", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{Concurrency: 1, Logger: log}, LogSlowHandler: 50 * time.Millisecond})
	drained := make(chan error, 1)
	go func() {
		_, err := d.Drain(ctx(t), 200*time.Millisecond)
		drained <- err
	}()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for strings.Count(logs.String(), "handler still running") < 2 {
		select {
		case <-tick.C:
		case <-deadline:
			close(release)
			t.Fatalf("a running handler was not logged twice within 10 s:\n%s", logs.String())
		}
	}
	close(release)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "handler still running") {
			line = l
		}
	}
	for _, want := range []string{"activity=" + in.ActivityID, "workspace=" + in.WorkspaceID, "running_for=", "timeout=5m0s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the running handler's line lacks %q: %s", want, line)
		}
	}
	if d.Stats().Handled != 1 {
		t.Fatalf("stats %+v, want the message handled once released", d.Stats())
	}
}
