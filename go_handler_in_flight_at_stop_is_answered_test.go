package relay_test

import (
	"context"
	"testing"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Relay.Run stops as connect does: when its context ends, the handler in
// flight finishes (its own context stays alive) and its answer is posted
// before Run returns nil.
func TestGoHandlerInFlightAtStopIsAnswered(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	started, release := make(chan struct{}), make(chan struct{})
	r := open(t, func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
		close(started)
		<-release
		if err := c.Err(); err != nil {
			return relay.Answer{}, err
		}
		return relay.Answer{Text: "finished: " + m.Text}, nil
	}, settings(w)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	pipelinetest.Eventually(t, 10*time.Second, "poll mode", func() bool { return w.Plat.Status(w.Agent.ID).DeliveryMode == "poll" })
	w.SendCanvas("slow")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never started")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v with a handler in flight", err)
	case <-time.After(200 * time.Millisecond): // Run waits for the handler
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the handler's end")
	}
	if n := w.Plat.Notifications(w.Agent.ID); len(n) != 1 || n[0].Message != "finished: slow" {
		t.Fatalf("canvas got %+v, want the answer of the handler in flight at the stop", n)
	}
}
