package poller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
)

// A poller group starts and stops single workspaces with PollWorkspace:
// it polls, heartbeats and holds the event stream until its context ends,
// returns only when all of that ended (no request of the workspace
// follows), and a later call takes the workspace up again.
func TestPollWorkspaceStartsAndStopsOneWorkspace(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{SSE: true, HeartbeatInterval: 50 * time.Millisecond})

	polling := func() (stop func() error) {
		c, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.PollWorkspace(c, e.ws.ID) }()
		return func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(10 * time.Second):
				t.Fatal("PollWorkspace did not return within 10s of its context's end")
				return nil
			}
		}
	}

	stop := polling()
	e.waitSeeded(e.ws.ID)
	e.sendCanvas(e.ws.ID, "first")
	waitFor(t, 10*time.Second, "the first message published", func() bool { return streamCount(t, e.topo.Inbound) == 1 })
	waitFor(t, 10*time.Second, "a heartbeat", func() bool { return e.requests("POST", "/registry/heartbeat") > 0 })
	if err := stop(); err != nil {
		t.Fatalf("PollWorkspace after its context ended: %v, want nil", err)
	}

	// Stopped: no poll, heartbeat or stream of the workspace follows, over
	// many poll (20 ms) and heartbeat (50 ms) intervals.
	before := len(e.plat.Requests())
	time.Sleep(500 * time.Millisecond)
	if after := e.plat.Requests()[before:]; len(after) > 0 {
		t.Fatalf("%d requests after PollWorkspace returned, the first %s %s", len(after), after[0].Method, after[0].Path)
	}

	e.sendCanvas(e.ws.ID, "second")
	stop = polling()
	waitFor(t, 10*time.Second, "the second message published by the next call", func() bool { return streamCount(t, e.topo.Inbound) == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))

	if err := p.PollWorkspace(context.Background(), "00000000-0000-4000-8000-000000000000"); !errors.Is(err, poller.ErrUnknownWorkspace) {
		t.Fatalf("an unconfigured workspace: %v, want ErrUnknownWorkspace", err)
	}
}
