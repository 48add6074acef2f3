package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// shout answers a message with its text and where it came from.
func shout(c *relay.Context, m *relay.Message) (relay.Answer, error) {
	if c.Err() != nil {
		return relay.Answer{}, c.Err()
	}
	return relay.Answer{Text: "go handler: " + m.Text + " from " + string(m.Source)}, nil
}

// settings are a relay's settings in world w, from code alone: its
// platform, workspace and NATS, no MOLECULE_HANDLER.
func settings(w *pipelinetest.World, more ...relay.Option) []relay.Option {
	return append([]relay.Option{
		relay.Environ(nil),
		relay.Platform(w.Plat.URL()), relay.Workspace(w.Agent.ID, w.Agent.Token),
		relay.Setting("NATS_URL", w.NATSURL()),
		relay.Setting("MOLECULE_POLL_INTERVAL", "1s"),
		relay.Logger(pipelinetest.Logger()),
	}, more...)
}

func open(t *testing.T, h relay.Handler, opts ...relay.Option) *relay.Relay {
	t.Helper()
	r, err := relay.New(pipelinetest.Ctx(t), h, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// A one-shot run (connect --once) runs the Go handler: the first run
// registers the workspace, the second answers what was sent since and
// reports it.
func TestGoHandlerAnswersInAOneShotRun(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := open(t, shout, settings(w)...)
	if rep, err := r.Once(pipelinetest.Ctx(t), 200*time.Millisecond); err != nil {
		t.Fatalf("first Once: %v %+v", err, rep)
	}
	w.SendCanvas("once")
	rep, err := r.Once(pipelinetest.Ctx(t), 200*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("second Once: %v %+v", err, rep)
	}
	if rep.Handled != 1 || rep.Replied != 1 || len(rep.Polled) != 1 || rep.Polled[0].Published != 1 {
		t.Errorf("report %+v: want 1 published, handled and replied", rep)
	}
	if n := w.Plat.Notifications(w.Agent.ID); len(n) != 1 || n[0].Message != "go handler: once from canvas_user" {
		t.Errorf("canvas got %+v", n)
	}
}

// One stage per process: a relay that only dispatches runs the Go
// handler (it needs no MOLECULE_HANDLER) on what another relay, polling
// and replying, stores in the same NATS; both stop when their context
// ends.
func TestGoHandlerRunsInADispatchOnlyRelay(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	edges := open(t, nil, settings(w, relay.Stages(relay.Poll, relay.Reply))...)
	dispatch := open(t, shout, settings(w, relay.Stages(relay.Dispatch))...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, r := range []*relay.Relay{edges, dispatch} {
		go func() { done <- r.Run(ctx) }()
	}
	pipelinetest.Eventually(t, 10*time.Second, "poll mode", func() bool { return w.Plat.Status(w.Agent.ID).DeliveryMode == "poll" })
	w.SendCanvas("split")
	w.WaitReplies(1, 10*time.Second)
	if n := w.Plat.Notifications(w.Agent.ID); n[0].Message != "go handler: split from canvas_user" {
		t.Errorf("canvas got %q", n[0].Message)
	}
	cancel()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after cancel: %v, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return within 20s of its cancel")
		}
	}
}

// Bad settings are refused before anything is contacted, with an error
// that names the setting: an unknown name, a bad value, a dispatcher
// without a Go handler whose MOLECULE_HANDLER is no built-in, no stage.
func TestBadSettingsAreRefusedByName(t *testing.T) {
	t.Parallel()
	ctx := pipelinetest.Ctx(t)
	for _, c := range []struct {
		name string
		h    relay.Handler
		opts []relay.Option
		want string
	}{
		{"unknown", shout, []relay.Option{relay.Setting("MOLECULE_POLL_INTERVALL", "1s")}, "MOLECULE_POLL_INTERVALL"},
		{"bad value", shout, []relay.Option{relay.Setting("MOLECULE_POLL_INTERVAL", "soon")}, "MOLECULE_POLL_INTERVAL"},
		{"bad built-in", nil, []relay.Option{relay.Stages(relay.Dispatch), relay.Setting("MOLECULE_HANDLER", "nosuch:x")}, "MOLECULE_HANDLER"},
		{"no stage", shout, []relay.Option{relay.Stages()}, "no stage"},
	} {
		_, err := relay.New(ctx, c.h, append([]relay.Option{relay.Environ(nil)}, c.opts...)...)
		if !errors.Is(err, relay.ErrInvalidConfig) || !contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrInvalidConfig naming %s", c.name, err, c.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
