package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// With the dispatcher in the process (Config.Tasks), the heartbeat says
// what the platform shows (enteros-core aeec8e47 registry.go:1436-1440:
// active_tasks, current_task, is_busy derived from active_tasks > 0):
// one handler running, who it answers and never what the message says;
// and when it finishes, a heartbeat says so at once, not an interval
// later (the canvas shows "thinking" while current_task is set).
func TestHeartbeatSaysBusyWhileAHandlerRuns(t *testing.T) {
	const interval = 4 * time.Second
	w := pipelinetest.New(t, pipelinetest.Options{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, NoPoller: true, Direct: true})
	t.Cleanup(func() { pl.Stop(t) })
	p := w.NewPoller(w.Proc(), poller.Config{HeartbeatInterval: interval, Tasks: pl.Dispatcher})
	pipelinetest.Start(t, p.Run)
	w.WaitSeeded(w.Agent.ID)

	w.SendCanvas("the secret plan")
	<-started
	var busy moleculetest.WorkspaceStatus
	pipelinetest.Eventually(t, 2*interval, "a heartbeat saying busy", func() bool {
		busy = w.Plat.Status(w.Agent.ID)
		return busy.ActiveTasks == 1
	})
	close(release)
	released := time.Now()
	if busy.CurrentTask != "answering a canvas message" || !busy.Busy {
		t.Errorf("busy heartbeat: current_task %q, is_busy %v", busy.CurrentTask, busy.Busy)
	}
	pipelinetest.Eventually(t, interval*3/4, "a heartbeat saying idle before the next regular one", func() bool {
		st := w.Plat.Status(w.Agent.ID)
		return st.ActiveTasks == 0 && st.CurrentTask == "" && !st.Busy && st.Heartbeats == busy.Heartbeats+1
	})
	t.Logf("handler end to idle heartbeat: %s (interval %s)", time.Since(released).Round(time.Millisecond), interval)
}
