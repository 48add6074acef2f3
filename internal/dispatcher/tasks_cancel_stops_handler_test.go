//go:build unix

package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// cancelWorld is a relay with TWO dispatcher processes of one slot each,
// so a cancel is read by another process than the one running the
// handler it cancels, and a plain A2A peer that sends messages with a
// taskId of its own and then tasks/cancel (A2A v0.3 TaskIdParams).
type cancelWorld struct {
	*pipelinetest.World
	peer moleculetest.Workspace
	ds   []*dispatcher.Dispatcher
}

func newCancelWorld(t *testing.T, h handler.Handler) *cancelWorld {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	// The poller wakes on the platform's events, as connect runs it.
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true, Poller: poller.Config{SSE: true}})
	t.Cleanup(func() { pl.Stop(t) })
	cw := &cancelWorld{World: w, peer: w.Peers[0]}
	for range 2 {
		d := w.NewDispatcher(w.Proc(), h, dispatcher.Config{Config: stage.Config{Concurrency: 1}})
		pipelinetest.Start(t, d.Run)
		cw.ds = append(cw.ds, d)
	}
	w.WaitSeeded(w.Agent.ID)
	return cw
}

// send posts a JSON-RPC request of method with params as the peer, with
// its bearer and X-Workspace-ID, and returns when the platform queued it.
func (cw *cancelWorld) send(t *testing.T, method string, params map[string]any) time.Time {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprint(time.Now().UnixNano()), "method": method, "params": params})
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cw.peer.Token)
	h.Set("X-Workspace-ID", cw.peer.ID)
	if st, resp, err := cw.Plat.SendRaw(pipelinetest.Ctx(t), cw.Agent.ID, h, body); err != nil || st != http.StatusOK {
		t.Fatalf("%s: %d %s %v", method, st, resp, err)
	}
	return time.Now()
}

func (cw *cancelWorld) ask(t *testing.T, text, messageID, taskID string) {
	msg := map[string]any{"role": "user", "messageId": messageID, "parts": []any{map[string]any{"kind": "text", "text": text}}}
	if taskID != "" {
		msg["taskId"] = taskID
	}
	cw.send(t, "message/send", map[string]any{"message": msg})
}

func (cw *cancelWorld) cancel(t *testing.T, taskID string) time.Time {
	return cw.send(t, "tasks/cancel", map[string]any{"id": taskID})
}

func (cw *cancelWorld) stats() (s dispatcher.Stats) {
	for _, d := range cw.ds {
		x := d.Stats()
		s.Cancels += x.Cancels
		s.Cancelled += x.Cancelled
		s.Handled += x.Handled
		s.Replied += x.Replied
	}
	return s
}

// outcome is the handled record's outcome of the agent's message text.
func (cw *cancelWorld) outcome(t *testing.T, text string) string {
	e, err := cw.Obs.Topo.Handled.Get(pipelinetest.Ctx(t), events.HandledKey(cw.Agent.ID, cw.SentText(text).ActivityID))
	if err != nil {
		return err.Error()
	}
	var rec events.HandledRecord
	_ = json.Unmarshal(e.Value(), &rec)
	return rec.Outcome
}

// settled checks that nothing was answered or dead-lettered and the
// inbound stream is empty.
func (cw *cancelWorld) settled(t *testing.T) {
	t.Helper()
	pipelinetest.Eventually(t, 10*time.Second, "the inbound stream empty", func() bool { in, _ := cw.Queued(); return in == 0 })
	if n := cw.Replies(); n != 0 {
		t.Errorf("%d replies, want none (a cancel and a cancelled message are not answered)", n)
	}
	if dl := cw.DeadLetters(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}

// A peer's tasks/cancel ends the context of the Go handler running its
// message, by the message's taskId or, for a sender that set none, its
// messageId, in another dispatcher process than the one that read the
// cancel; the message is recorded cancelled and nothing is answered.
func TestTasksCancelEndsRunningGoHandler(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"taskId", "messageId"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			started, ended := make(chan struct{}, 1), make(chan time.Time, 1)
			cw := newCancelWorld(t, handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
				started <- struct{}{}
				<-ctx.Done()
				ended <- time.Now()
				return "", ctx.Err()
			}))
			taskID := ""
			if by == "taskId" {
				taskID = "task-1"
			}
			cw.ask(t, "long work", "msg-1", taskID)
			waitChan(t, started, "the handler started")
			id := taskID
			if id == "" {
				id = "msg-1"
			}
			sent := cw.cancel(t, id)
			at := waitChan(t, ended, "the handler's context ended")
			pipelinetest.Eventually(t, 10*time.Second, "the cancelled message recorded", func() bool {
				return cw.outcome(t, "long work") == events.OutcomeCancelled
			})
			cw.settled(t)
			if s := cw.stats(); s.Cancels != 1 || s.Cancelled != 1 {
				t.Errorf("stats %+v, want one cancel and one cancelled message", s)
			}
			t.Logf("by %s: cancel POST → handler context ended in %s", by, at.Sub(sent).Round(time.Microsecond))
		})
	}
}

// An exec: handler's program gets SIGTERM when its sender cancels: a
// script that traps it exits at once.
func TestTasksCancelStopsExecHandler(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prog, ready, mark := filepath.Join(dir, "agent.sh"), filepath.Join(dir, "ready"), filepath.Join(dir, "mark")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
trap 'echo term > "$MARK"; exit 0' TERM
echo started > "$READY"
sleep 30 & wait
`
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := handler.Parse("exec:"+prog, handler.Options{Env: []string{"MARK=" + mark, "READY=" + ready}})
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan time.Time, 1)
	cw := newCancelWorld(t, handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		text, err := exe.Handle(ctx, req)
		exited <- time.Now()
		return text, err
	}))
	cw.ask(t, "run the script", "msg-x", "task-x")
	if b, err := os.ReadFile(ready); err != nil || !strings.Contains(string(b), "started") {
		t.Fatalf("the program did not start: %q %v", b, err)
	}
	sent := cw.cancel(t, "task-x")
	at := waitChan(t, exited, "the program exited")
	if b, _ := os.ReadFile(mark); !strings.Contains(string(b), "term") {
		t.Errorf("the program got no SIGTERM (mark %q)", b)
	}
	pipelinetest.Eventually(t, 10*time.Second, "the cancelled message recorded", func() bool {
		return cw.outcome(t, "run the script") == events.OutcomeCancelled
	})
	cw.settled(t)
	t.Logf("cancel POST → exec child exited in %s", at.Sub(sent).Round(time.Microsecond))
}

// A cancel that comes before its message stops the message from running
// at all; a cancel of a task that runs nowhere is acknowledged: settled,
// not handled, not answered, not dead-lettered.
func TestTasksCancelBeforeItsMessageAndOfUnknownTask(t *testing.T) {
	t.Parallel()
	ran := make(chan string, 4)
	cw := newCancelWorld(t, handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		ran <- req.Message.Text
		return "", nil
	}))
	cw.cancel(t, "task-early")
	cw.cancel(t, "task-nobody-runs")
	pipelinetest.Eventually(t, 10*time.Second, "both cancels settled", func() bool { return cw.stats().Cancels == 2 })
	cw.ask(t, "too late", "msg-early", "task-early")
	pipelinetest.Eventually(t, 10*time.Second, "the message recorded cancelled", func() bool {
		return cw.outcome(t, "too late") == events.OutcomeCancelled
	})
	cw.settled(t)
	if len(ran) != 0 {
		t.Errorf("the handler ran on %q", <-ran)
	}
	if s := cw.stats(); s.Cancelled != 1 || s.Handled != 1 {
		t.Errorf("stats %+v, want the one message cancelled, nothing else handled", s)
	}
}

func waitChan[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20 s", what)
	}
	var zero T
	return zero
}
