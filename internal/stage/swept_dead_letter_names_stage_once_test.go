package stage_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// syncBuffer is a log written by the stage's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A message that exhausts its deliveries without an ack (a stage that
// hung or crashed on each) is swept to the dead-letter stream, and the
// line saying so names the stage once (the sweeper added a second
// stage= to the stage's logger) and the dead letter's sequence, with the
// command to inspect it.
func TestSweptDeadLetterNamesStageOnceAndItsSequence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{DispatcherMaxDeliver: 2})
	e.publish(t, 1)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Finishes nothing: each delivery comes back after the AckWait (1 s).
	r := e.runner(t, stage.Config{Logger: log}, nil, func(context.Context, *stage.Delivery) {})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var line string
	for line == "" {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no sweep line within 20 s:\n%s", logs.String())
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "moved to the dead-letter stream") {
				line = l
			}
		}
	}
	if n := strings.Count(line, " stage="); n != 1 {
		t.Errorf("the sweep line names the stage %d times: %s", n, line)
	}
	if !strings.Contains(line, "dlq_seq=1 ") || !strings.Contains(line, "`molecule-relay dlq show 1`") {
		t.Errorf("the sweep line does not name the dead letter's sequence and how to see it: %s", line)
	}
}
