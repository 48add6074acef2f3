package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// checkHandledOnce checks that the handler completed exactly once for every
// sent message and never for anything else.
func checkHandledOnce(t *testing.T, rec *pipelinetest.Recorder, sent []pipelinetest.Sent) {
	t.Helper()
	done := rec.CompletionsByActivity()
	for _, s := range sent {
		if done[s.ActivityID] != 1 {
			t.Errorf("message %q (activity %s): handler completed %d times, want 1 (deliveries seen: %v)",
				s.Text, s.ActivityID, done[s.ActivityID], rec.Deliveries(s.ActivityID))
		}
		delete(done, s.ActivityID)
	}
	for id, n := range done {
		t.Errorf("handler completed %d times for activity %s, which was never sent to the agent", n, id)
	}
}

// waitDrained waits until the inbound and reply work queues are empty:
// every message was acked.
func waitDrained(t *testing.T, w *pipelinetest.World, within time.Duration) {
	t.Helper()
	pipelinetest.Eventually(t, within, "inbound and reply queues drained", func() bool {
		in, rep := w.Queued()
		return in == 0 && rep == 0
	})
}

// Guarantee 1: N mixed messages in (canvas users and two poll-mode peers)
// → exactly N handler completions and N replies, each to the right place
// with the right fields; the agent's own notify rows, which land on its
// own feed, are never answered.
func TestE2EMixedTrafficExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		extra int // dispatchers and repliers beyond the first, each its own process
	}{
		{"one worker per stage", 0},
		{"scaled out: three dispatchers and three repliers", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testMixedTraffic(t, tc.extra)
		})
	}
}

func testMixedTraffic(t *testing.T, extra int) {
	const n = 60
	// The production AckWaits: this test counts handler starts, and a
	// 1 s test AckWait can expire under a loaded CI machine while a
	// handler runs (a redelivery the handled record then absorbs, but
	// a second start all the same). Recovery is pinned elsewhere.
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 2, Topology: events.TopologyConfig{
		DispatcherAckWait: events.DefaultDispatcherAckWait, ReplierAckWait: events.DefaultReplierAckWait}})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{})
	var extras []*pipelinetest.Running
	for range extra {
		extras = append(extras,
			pipelinetest.Start(t, w.NewDispatcher(w.Proc(), pl.Recorder, dispatcher.Config{}).Run),
			pipelinetest.Start(t, w.NewReplier(w.Proc(), nil, replier.Config{}).Run))
	}
	w.WaitSeeded(w.Agent.ID)

	w.SendMixed("hello", n)
	w.WaitReplies(n, 30*time.Second)
	waitDrained(t, w, 10*time.Second)
	for _, r := range extras {
		if err := r.Stop(); err != nil {
			t.Errorf("extra stage: %v", err)
		}
	}
	pl.Stop(t)

	sent := w.Sent()
	if len(sent) != n {
		t.Fatalf("the agent's feed holds %d messages, want %d", len(sent), n)
	}
	canvas := 0
	for _, s := range sent {
		if s.Canvas() {
			canvas++
		}
	}
	if canvas == 0 || canvas == n {
		t.Fatalf("traffic not mixed: %d canvas of %d", canvas, n)
	}
	if got := pl.Recorder.Started(); got != n {
		t.Errorf("handler started %d times, want %d", got, n)
	}
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)

	// The notify rows are on the agent's feed now. A fresh poller that
	// re-reads the whole recent feed publishes nothing, and a dispatcher
	// finds nothing to hand to a handler.
	proc := w.Proc()
	p := w.NewPoller(proc, poller.Config{OverlapWindow: time.Minute, OverlapEvery: time.Nanosecond})
	res, err := p.RunOnce(pipelinetest.Ctx(t))
	if err != nil || res.Err() != nil {
		t.Fatalf("poll after the replies: %v %v", err, res.Err())
	}
	r := res.Workspaces[0]
	if r.Published != 0 || !r.Overlap || r.Skipped[poller.SkipOwnNotify] < canvas {
		t.Errorf("poll after the replies: published %d, overlap %v, own notifies skipped %d; want 0, true, >= %d",
			r.Published, r.Overlap, r.Skipped[poller.SkipOwnNotify], canvas)
	}
	d := w.NewDispatcher(proc, pl.Recorder, dispatcher.Config{})
	st, err := d.Drain(pipelinetest.Ctx(t), 300*time.Millisecond)
	if err != nil || st.Received != 0 {
		t.Errorf("drain after the replies: received %d (%v), want 0", st.Received, err)
	}
	if got := pl.Recorder.Started(); got != n {
		t.Errorf("handler started %d times after the extra poll, want %d", got, n)
	}
	if got := w.Replies(); got != n {
		t.Errorf("%d replies after the extra poll, want %d", got, n)
	}
}

// Guarantee 3: rows the platform commits late, behind the cursor, are all
// delivered by the overlap re-read, exactly once.
func TestE2ELateCommittedRowsDeliveredOnce(t *testing.T) {
	t.Parallel()
	const n = 25
	w := pipelinetest.New(t, pipelinetest.Options{
		Peers:    1,
		Platform: []moleculetest.Option{moleculetest.WithLateCommit(0.2, 300*time.Millisecond), moleculetest.WithRateLimit(0, 0)},
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{
		Poller: poller.Config{PollInterval: 20 * time.Millisecond, OverlapWindow: 10 * time.Second, OverlapEvery: 200 * time.Millisecond},
	})
	w.WaitSeeded(w.Agent.ID)
	w.SendMixed("late", n)
	w.WaitReplies(n, 30*time.Second)
	waitDrained(t, w, 10*time.Second)
	pl.Stop(t)

	sent := w.Sent()
	if len(sent) != n {
		t.Fatalf("the agent's feed holds %d messages, want %d", len(sent), n)
	}
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)
}

// Guarantee 4: a poison message ends in the dead-letter stream without
// stalling the messages behind it (one handler worker, so they really are
// behind it); dlq.Replay re-delivers it and it gets its one reply.
func TestE2EPoisonMessageDeadLetteredAndReplayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		permanent  bool
		reason     string
		deliveries []uint64 // the handler's view of the poison, replay included
	}{
		{"handler.ErrPermanent", true, events.ReasonPermanent, []uint64{1, 1}},
		{"fails until MaxDeliver", false, events.ReasonMaxDeliveries, []uint64{1, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const behind = 10
			w := pipelinetest.New(t, pipelinetest.Options{Peers: 1, Topology: events.TopologyConfig{DispatcherMaxDeliver: 2}})
			var cured atomic.Bool
			rec := pipelinetest.NewRecorder(handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
				if strings.HasPrefix(req.Message.Text, "poison") && !cured.Load() {
					if tc.permanent {
						return "", fmt.Errorf("%w: cannot digest this", handler.ErrPermanent)
					}
					return "", errors.New("chokes on this every time")
				}
				return handler.Echo.Handle(ctx, req)
			}))
			pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: rec, Dispatcher: dispatcher.Config{Config: stage.Config{Concurrency: 1}}})
			w.WaitSeeded(w.Agent.ID)

			w.SendCanvas("poison pill")
			w.SendMixed("behind", behind)
			w.WaitReplies(behind, 20*time.Second)
			var dead []dlq.Entry
			pipelinetest.Eventually(t, 10*time.Second, "the poison in the dead-letter stream", func() bool {
				dead = w.DeadLetters()
				return len(dead) > 0
			})
			poison := w.SentText("poison pill")
			if len(dead) != 1 || dead[0].DeadLetter == nil {
				t.Fatalf("dead letters: %+v, want exactly the poison", dead)
			}
			dl := dead[0].DeadLetter
			if dl.Stage != events.StageDispatcher || dl.ActivityID != poison.ActivityID || dl.Reason != tc.reason {
				t.Fatalf("dead letter: stage %s activity %s reason %s; want dispatcher, %s, %s", dl.Stage, dl.ActivityID, dl.Reason, poison.ActivityID, tc.reason)
			}
			waitDrained(t, w, 10*time.Second)
			var others []pipelinetest.Sent
			for _, s := range w.Sent() {
				if s.ActivityID != poison.ActivityID {
					others = append(others, s)
				}
			}
			w.CheckExactlyOnce(t, others) // the poison has no reply yet

			cured.Store(true)
			if err := dlq.Replay(pipelinetest.Ctx(t), w.Obs.JS, dead[0].Seq); err != nil {
				t.Fatalf("replay: %v", err)
			}
			w.WaitReplies(behind+1, 20*time.Second)
			waitDrained(t, w, 10*time.Second)
			pl.Stop(t)
			sent := w.Sent()
			w.CheckExactlyOnce(t, sent)
			if left := w.DeadLetters(); len(left) != 0 {
				t.Errorf("%d dead letters left after the replay", len(left))
			}
			if got := rec.Deliveries(poison.ActivityID); fmt.Sprint(got) != fmt.Sprint(tc.deliveries) {
				t.Errorf("poison handler deliveries %v, want %v", got, tc.deliveries)
			}
			checkHandledOnce(t, rec, sent)
		})
	}
}
