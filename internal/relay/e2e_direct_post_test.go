package relay_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// With the dispatcher and the replier in one process, every canvas reply
// is posted by the dispatcher in its own slot: only the peer replies go
// through the reply stream (an /a2a to a push-mode peer may wait minutes
// for its agent, which must not hold a handler slot), each message is
// handled once and answered once, and the replier's counters count the
// direct posts.
func TestE2EDirectPostSkipsTheReplyStream(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 2})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Direct: true})
	w.WaitSeeded(w.Agent.ID)
	const n = 12
	w.SendMixed("direct", n)
	w.WaitReplies(n, 20*time.Second)
	waitDrained(t, w, 10*time.Second)
	pl.Stop(t)

	const canvas, peer = n / 3, n - n/3 // SendMixed: every third from the canvas
	checkOnceThroughTheStream(t, w, pl, peer, "the peer replies alone: every canvas reply was posted directly")
	st := pl.Replier.Stats()
	if st.Direct != canvas || st.DirectFallbacks != 0 || st.Notified != canvas || st.SentA2A != peer || st.Received != peer {
		t.Errorf("replier stats %+v: want %d canvas replies posted directly and %d peer replies delivered by the stream", st, canvas, peer)
	}
	if d := pl.Dispatcher.Stats(); d.Replied != n {
		t.Errorf("dispatcher replied %d, want %d", d.Replied, n)
	}
	checkPostingMarks(t, w)
}

// checkPostingMarks checks that the handled record of each canvas message
// carries the posting mark of its direct post, and a peer message's none
// (its reply goes through the stream, with a posting record of its own).
func checkPostingMarks(t *testing.T, w *pipelinetest.World) {
	t.Helper()
	ctx := context.Background()
	for _, s := range w.Sent() {
		entry, err := w.Obs.Topo.Handled.Get(ctx, events.HandledKey(w.Agent.ID, s.ActivityID))
		if err != nil {
			t.Fatalf("handled record of %q: %v", s.Text, err)
		}
		var rec events.HandledRecord
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if marked := !rec.Mark().IsZero(); marked != s.Canvas() || marked && !rec.DirectDeadline.After(rec.DirectPostingAt) {
			t.Errorf("message %q (canvas %v): posting mark %+v", s.Text, s.Canvas(), rec.Mark())
		}
	}
}

// Guarantee 2f: a process whose dispatcher posts a canvas reply directly,
// killed at each point of the direct post. The inbound message's
// redelivery finds the handled record with its posting mark: the handler
// does not run again, the posting record the mark stands for is written
// (unless a record is there: the direct post's sent record, or the posting
// record it wrote after an unknown outcome), the recorded reply is
// published to the reply stream, and the replier stage follows the reply
// record (posting: settle against the feed; sent: ack). One post overall.
// (A peer reply is never posted directly:
// TestE2EDirectPostSkipsTheReplyStream.)
func TestE2ECrashDirectPost(t *testing.T) {
	t.Parallel()
	type kill = func() error
	replierPoint := func(set func(*crashpoint.Replier, func(context.Context, *events.Reply) error)) func(kill) *crashpoint.Dispatcher {
		return func(k kill) *crashpoint.Dispatcher {
			h := &crashpoint.Dispatcher{}
			set(&h.Direct, func(_ context.Context, r *events.Reply) error {
				if r.Text != "echo: crash me" {
					return nil
				}
				return k()
			})
			return h
		}
	}
	dispatcherPoint := func(set func(*crashpoint.Dispatcher, func(context.Context, *events.Inbound) error)) func(kill) *crashpoint.Dispatcher {
		return func(k kill) *crashpoint.Dispatcher {
			h := &crashpoint.Dispatcher{}
			set(h, func(_ context.Context, m *events.Inbound) error {
				if m.Text != "crash me" {
					return nil
				}
				return k()
			})
			return h
		}
	}
	afterDirectPost := dispatcherPoint(func(h *crashpoint.Dispatcher, f func(context.Context, *events.Inbound) error) { h.AfterDirectPost = f })
	points := []struct {
		name  string
		hooks func(kill) *crashpoint.Dispatcher
		// fault, when set, meets the direct post's notify.
		fault *moleculetest.Fault
	}{
		{"after the handled record (the posting mark), before the direct post", dispatcherPoint(func(h *crashpoint.Dispatcher, f func(context.Context, *events.Inbound) error) { h.AfterRecord = f }), nil},
		{"after the posting mark, before the POST", replierPoint(func(h *crashpoint.Replier, f func(context.Context, *events.Reply) error) { h.BeforePost = f }), nil},
		{"after the POST, before the sent record", replierPoint(func(h *crashpoint.Replier, f func(context.Context, *events.Reply) error) { h.AfterPost = f }), nil},
		{"after the sent record, before the inbound ack", replierPoint(func(h *crashpoint.Replier, f func(context.Context, *events.Reply) error) { h.AfterSent = f }), nil},
		{"after a refused (429) direct post, before the publish", afterDirectPost,
			&moleculetest.Fault{Method: http.MethodPost, Status: http.StatusTooManyRequests, Count: 1, Header: http.Header{"Retry-After": {"0"}}}},
		{"after a direct post whose outcome is unknown (502), before the publish", afterDirectPost,
			&moleculetest.Fault{Method: http.MethodPost, Status: http.StatusBadGateway, Count: 1}},
		{"after a direct post that reached the platform but answered 500, before the publish", afterDirectPost,
			&moleculetest.Fault{Method: http.MethodPost, Status: http.StatusInternalServerError, Count: 1, AfterHandler: true}},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			testCrashDirectPost(t, p.hooks, p.fault)
		})
	}
}

func testCrashDirectPost(t *testing.T, hooks func(kill func() error) *crashpoint.Dispatcher, fault *moleculetest.Fault) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	if fault != nil {
		f := *fault
		f.PathPrefix = "/workspaces/" + w.Agent.ID + "/notify"
		w.Plat.InjectFault(f)
	}
	rec := pipelinetest.NewRecorder(nil)
	crashDirectPoster(t, w, rec, hooks, "the crash in the direct post")

	// The next process: a dispatcher posting through its own replier.
	proc2 := w.Proc()
	d2 := w.NewDispatcher(proc2, rec, dispatcher.Config{Config: stage.Config{Direct: w.NewReplier(proc2, nil, replier.Config{})}})
	recoverInSecondDispatcher(t, w, pl, rec, d2, "crash me", 6, 15*time.Second)
	checkHandledOnce(t, rec, w.Sent())
	w.CheckExactlyOnce(t, w.Sent())
}

// A direct post the platform does not accept is not lost: the dispatcher
// publishes the reply to the reply stream, and the replier stage posts it
// (a 429: no record left) or settles it first (a gateway error: the
// posting record left by the direct post). One reply each.
func TestE2EDirectPostFallsBackToTheReplyStream(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	notify := "/workspaces/" + w.Agent.ID + "/notify"
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Direct: true})
	w.WaitSeeded(w.Agent.ID)
	// One at a time, so each fault meets the direct post it is meant for.
	w.Plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: notify, Status: http.StatusTooManyRequests, Count: 1,
		Header: http.Header{"Retry-After": {"0"}}})
	w.SendCanvas("refused once")
	w.WaitReplies(1, 20*time.Second)
	w.Plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: notify, Status: http.StatusBadGateway, Count: 1})
	w.SendCanvas("gateway error once")
	w.WaitReplies(2, 20*time.Second)
	waitDrained(t, w, 15*time.Second)
	pl.Stop(t)

	checkOnceThroughTheStream(t, w, pl, 2, "the 2 replies the direct post did not finish")
	if st := pl.Replier.Stats(); st.Direct != 0 || st.DirectFallbacks != 2 || st.Notified+st.Reconciled != 2 {
		t.Errorf("replier stats %+v: want 2 fallbacks, posted or settled by the stream", st)
	}
}

// checkOnceThroughTheStream checks that every message sent was handled
// once and answered once, and that the reply stream received want
// replies (why says which).
func checkOnceThroughTheStream(t *testing.T, w *pipelinetest.World, pl *pipelinetest.Pipeline, want uint64, why string) {
	t.Helper()
	sent := w.Sent()
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)
	info, err := w.Obs.Topo.Reply.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != want {
		t.Errorf("reply stream received %d messages, want %s", info.State.LastSeq, why)
	}
}

// crashDirectPoster runs a first process whose dispatcher posts directly
// through its own replier, sends "crash me", and waits until hooks'
// crash point killed that process (what: the crash, for the failure
// message).
func crashDirectPoster(t *testing.T, w *pipelinetest.World, rec *pipelinetest.Recorder, hooks func(kill func() error) *crashpoint.Dispatcher, what string) {
	t.Helper()
	proc1 := w.Proc()
	var crashed atomic.Bool
	var run1 *pipelinetest.Running
	kill := func() error {
		if !crashed.CompareAndSwap(false, true) {
			return nil
		}
		proc1.Kill()
		run1.Cancel()
		return errKilled
	}
	r1 := w.NewReplier(proc1, nil, replier.Config{NotifyTimeout: time.Second})
	d1 := w.NewDispatcher(proc1, rec, dispatcher.Config{Config: stage.Config{Direct: r1}})
	run1 = pipelinetest.Start(t, crashpoint.RunDispatcher(d1.Run, hooks(kill)))
	w.WaitSeeded(w.Agent.ID)
	w.SendCanvas("crash me")
	pipelinetest.Eventually(t, 15*time.Second, what, crashed.Load)
	<-run1.Done()
}
