package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// maxRedelivery is the bound on the time from a stage's death to the
// redelivery of the message it held, with the production AckWaits.
const maxRedelivery = 10 * time.Second

// productionTopology is the topology with the production AckWaits (the
// events defaults), not pipelinetest's 1 s test values.
func productionTopology() events.TopologyConfig {
	return events.TopologyConfig{
		DispatcherAckWait: events.DefaultDispatcherAckWait,
		ReplierAckWait:    events.DefaultReplierAckWait,
	}
}

// firstTime records the first instant something happened.
type firstTime struct {
	once sync.Once
	at   time.Time
	ch   chan struct{}
}

func newFirstTime() *firstTime { return &firstTime{ch: make(chan struct{})} }

func (f *firstTime) mark() {
	f.once.Do(func() {
		f.at = time.Now()
		close(f.ch)
	})
}

// checkWithin waits for the redelivery to the other stage after killed,
// logs the time it took and checks it against maxRedelivery.
func (f *firstTime) checkWithin(t *testing.T, killed time.Time, stage string, ackWait, alive time.Duration) {
	t.Helper()
	select {
	case <-f.ch:
	case <-time.After(maxRedelivery + 5*time.Second):
		t.Fatalf("no redelivery within %s of the kill", time.Since(killed))
	}
	took := f.at.Sub(killed)
	t.Logf("%s: AckWait %s; held alive for %s without redelivery; killed; redelivered to the other %s after %s",
		stage, ackWait, alive, stage, took.Round(10*time.Millisecond))
	if took > maxRedelivery {
		t.Errorf("time to redelivery %s, want <= %s", took, maxRedelivery)
	}
}

// aliveWindow is how long a stage holds its message, alive, before it is
// killed: twice the AckWait, so a keep-alive that did not reach the server
// would show as a redelivery to the other stage already running.
func aliveWindow(ackWait time.Duration) time.Duration { return 2 * ackWait }

// Recovery after a crash, dispatcher: with the production AckWait, a
// handler that runs for twice the AckWait is kept alive (no redelivery to
// the second dispatcher, already running); once its process is killed the
// message reaches the second dispatcher within maxRedelivery. One reply.
func TestE2ECrashRedeliveryTimeDispatcher(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1, Topology: productionTopology()})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	entered := make(chan struct{})
	release := make(chan struct{})
	var enterOnce sync.Once
	redelivered := newFirstTime()
	rec := pipelinetest.NewRecorder(handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		if req.Message.Text == "long handler" {
			if req.Delivery == 1 {
				enterOnce.Do(func() { close(entered) })
				<-release
				return "", errKilled // the process is dead by now
			}
			redelivered.mark()
		}
		return handler.Echo.Handle(ctx, req)
	}))
	cfg := dispatcher.Config{Config: stage.Config{FetchWait: stage.DefaultFetchWait}}
	proc1 := w.Proc()
	d1 := w.NewDispatcher(proc1, rec, cfg)
	if got := d1.Config().ProgressInterval; got >= events.DefaultDispatcherAckWait/2 {
		t.Fatalf("progress interval %s: want well under the AckWait %s", got, events.DefaultDispatcherAckWait)
	}
	run1 := pipelinetest.Start(t, d1.Run)
	w.WaitSeeded(w.Agent.ID)
	w.SendPeer(0, "long handler")
	select {
	case <-entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the handler never started")
	}
	run2 := pipelinetest.Start(t, w.NewDispatcher(w.Proc(), rec, cfg).Run)

	alive := aliveWindow(events.DefaultDispatcherAckWait)
	select {
	case <-redelivered.ch:
		t.Fatalf("redelivered %s into a live handler run (AckWait %s): the keep-alive did not hold it", time.Since(redelivered.at), events.DefaultDispatcherAckWait)
	case <-time.After(alive):
	}

	proc1.Kill()
	killed := time.Now()
	run1.Cancel()
	redelivered.checkWithin(t, killed, "dispatcher", events.DefaultDispatcherAckWait, alive)

	w.WaitReplies(1, 20*time.Second)
	waitDrained(t, w, 10*time.Second)
	close(release)
	<-run1.Done()
	if err := run2.Stop(); err != nil {
		t.Errorf("second dispatcher: %v", err)
	}
	pl.Stop(t)
	target := w.SentText("long handler")
	if got := rec.Deliveries(target.ActivityID); fmt.Sprint(got) != "[1 2]" {
		t.Errorf("handler deliveries %v, want [1 2]", got)
	}
	sent := w.Sent()
	checkHandledOnce(t, rec, sent)
	w.CheckExactlyOnce(t, sent)
}

// Recovery after a crash, replier: with the production AckWait, a replier
// that holds a peer reply (its posting record written) for twice the
// AckWait keeps it (no redelivery to the second replier, already
// running); once its process is killed before the POST, the reply reaches
// the second replier within maxRedelivery and is posted once.
func TestE2ECrashRedeliveryTimeReplier(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1, Topology: productionTopology()})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoReplier: true})
	const text = "echo: slow post"
	alive := aliveWindow(events.DefaultReplierAckWait)
	redelivered := newFirstTime()
	cfg := replier.Config{Config: stage.Config{FetchWait: stage.DefaultFetchWait}}

	proc1 := w.Proc()
	var crashed atomic.Bool
	var killed time.Time
	entered := make(chan struct{})
	var run1 *pipelinetest.Running
	hooks1 := &crashpoint.Replier{BeforePost: func(_ context.Context, r *events.Reply) error {
		if r.Text != text || !crashed.CompareAndSwap(false, true) {
			return nil
		}
		close(entered)
		// Held, alive, inside the stage (as a slow post would be); a
		// redelivery meanwhile would reach the second replier.
		select {
		case <-redelivered.ch:
		case <-time.After(alive):
		}
		proc1.Kill()
		killed = time.Now()
		run1.Cancel()
		return errKilled
	}}
	r1 := w.NewReplier(proc1, nil, cfg)
	if got := r1.Config().ProgressInterval; got >= events.DefaultReplierAckWait/2 {
		t.Fatalf("progress interval %s: want well under the AckWait %s", got, events.DefaultReplierAckWait)
	}
	run1 = pipelinetest.Start(t, crashpoint.RunReplier(r1.Run, hooks1))
	w.WaitSeeded(w.Agent.ID)
	w.SendPeer(0, "slow post")
	select {
	case <-entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the replier never reached its post")
	}
	hooks2 := &crashpoint.Replier{BeforePost: func(_ context.Context, r *events.Reply) error {
		if r.Text == text {
			redelivered.mark()
		}
		return nil
	}}
	run2 := pipelinetest.Start(t, crashpoint.RunReplier(w.NewReplier(w.Proc(), nil, cfg).Run, hooks2))
	<-run1.Done()
	select {
	case <-redelivered.ch:
		if redelivered.at.Before(killed) {
			t.Fatalf("redelivered %s before the kill, into a live replier (AckWait %s): the keep-alive did not hold it",
				killed.Sub(redelivered.at), events.DefaultReplierAckWait)
		}
	default:
	}
	redelivered.checkWithin(t, killed, "replier", events.DefaultReplierAckWait, alive)

	w.WaitReplies(1, 20*time.Second)
	waitDrained(t, w, 10*time.Second)
	if err := run2.Stop(); err != nil {
		t.Errorf("second replier: %v", err)
	}
	pl.Stop(t)
	sent := w.Sent()
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)
}
