package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// The poller's heartbeat reports the handlers of a dispatcher the runtime
// built apart from its stages (Runtime.Dispatcher, as mcp does when
// Claude is ready): active_tasks and current_task say one canvas message
// is being answered.
func TestHeartbeatReportsThisProcessDispatcher(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID="+w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"NATS_URL="+w.NATSURL(),
	)
	poll := relay.Stages{Poll: true}
	if rep, err := rt.Once(pipelinetest.Ctx(t), poll, 200*time.Millisecond); err != nil || !rep.OK() {
		t.Fatalf("first Once (register, seed): %v %+v", err, rep)
	}
	if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, "hold on"); err != nil {
		t.Fatal(err)
	}
	if rep, err := rt.Once(pipelinetest.Ctx(t), poll, 200*time.Millisecond); err != nil || !rep.OK() || rep.Poll.Published() != 1 {
		t.Fatalf("second Once (publish): %v %+v", err, rep)
	}
	started, release := make(chan struct{}), make(chan struct{})
	d, err := rt.Dispatcher(handler.Func(func(ctx context.Context, _ *handler.Request) (string, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "", nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { close(release) })
	go func() { _ = d.Run(ctx) }()
	<-started
	go func() { _ = rt.Run(ctx, poll) }()
	pipelinetest.Eventually(t, 10*time.Second, "a heartbeat naming the running handler", func() bool {
		st := w.Plat.Status(w.Agent.ID)
		return st.ActiveTasks == 1 && st.CurrentTask == "answering a canvas message"
	})
}
