package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// The stop's summary counts what the run handled and posted, not only
// what the stop itself finished: after two messages answered before the
// stop it said "stop: done handled=0 replies_posted=0".
func TestStopSummaryCountsWhatTheRunHandled(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	var logs pipelinetest.LogBuffer
	rt := openRelay(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(), "MOLECULE_WORKSPACE_ID="+w.Agent.ID, "MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"MOLECULE_HANDLER=echo", "MOLECULE_POLL_INTERVAL=200ms", "NATS_URL="+w.NATSURL())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx, relay.All) }()
	w.WaitSeeded(w.Agent.ID)
	w.SendCanvas("one")
	w.SendCanvas("two")
	w.WaitReplies(2, 15*time.Second)
	// Their milestone lines come after the counts: both are counted
	// before the stop begins.
	pipelinetest.Eventually(t, 15*time.Second, "both handled and posted", func() bool {
		l := logs.String()
		return strings.Count(l, "dispatcher: message handled") == 2 && strings.Count(l, "replier: reply posted") == 2
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	var summary string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "stop: done") {
			summary = l
		}
	}
	for _, want := range []string{" handled=2 ", " replies_posted=2 ", " handled_while_stopping=0 ", " dead_lettered=0 ", " replies_dead_lettered=0 "} {
		if !strings.Contains(summary+" ", want) {
			t.Errorf("stop summary lacks %q: %q", strings.TrimSpace(want), summary)
		}
	}
	if strings.Contains(logs.String(), "press Ctrl-C again") {
		t.Errorf("a stop not begun by the CLI's signal speaks of a second Ctrl-C:\n%s", logs.String())
	}
}
