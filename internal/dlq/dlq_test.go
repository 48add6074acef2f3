package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

const (
	wsA = "35637291-d55e-4553-896c-13c2e02fe4f7"
	wsB = "b48f61e0-0000-4000-8000-000000000001"
)

var quiet = slog.New(slog.DiscardHandler)

func setup(t *testing.T, tc events.TopologyConfig) (jetstream.JetStream, *events.Topology) {
	t.Helper()
	tc.Storage = jetstream.MemoryStorage
	if tc.DispatcherAckWait == 0 {
		tc.DispatcherAckWait = time.Second
	}
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	topo, err := events.EnsureTopology(bg(t), js, tc)
	if err != nil {
		t.Fatal(err)
	}
	return js, topo
}

func bg(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func deadLetter(stage, ws, act, reason string, seq uint64) events.DeadLetter {
	env, _ := json.Marshal(map[string]any{"v": 1, "workspace_id": ws, "activity_id": act, "source": "canvas_user", "text": "hi"})
	subj := events.InboundSubject(ws)
	if stage == events.StageReplier {
		subj = events.ReplySubject(ws)
	}
	return events.DeadLetter{Stage: stage, WorkspaceID: ws, ActivityID: act, Reason: reason, Error: "boom",
		Deliveries: 3, OriginalSubject: subj, OriginalSeq: seq, Envelope: env}
}

func TestListGetPurge(t *testing.T) {
	t.Parallel()
	js, _ := setup(t, events.TopologyConfig{})
	ctx := bg(t)
	dls := []events.DeadLetter{
		deadLetter(events.StageDispatcher, wsA, "a1", events.ReasonPermanent, 1),
		deadLetter(events.StageDispatcher, wsB, "b1", events.ReasonMaxDeliveries, 2),
		deadLetter(events.StageReplier, wsA, "a2", events.ReasonPermanent, 3),
		deadLetter(events.StagePoller, "not a.valid*token", "x", events.ReasonMalformed, 4),
	}
	for _, dl := range dls {
		if err := dlq.Publish(ctx, js, dl); err != nil {
			t.Fatal(err)
		}
	}
	// A retried write of the same dead letter is de-duplicated.
	if err := dlq.Publish(ctx, js, dls[0]); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		f    dlq.Filter
		want []string
	}{
		{dlq.Filter{}, []string{"a1", "b1", "a2", "x"}},
		{dlq.Filter{Stage: events.StageDispatcher}, []string{"a1", "b1"}},
		{dlq.Filter{WorkspaceID: wsA}, []string{"a1", "a2"}},
		{dlq.Filter{Reason: events.ReasonPermanent}, []string{"a1", "a2"}},
		{dlq.Filter{Stage: events.StageReplier, WorkspaceID: wsA}, []string{"a2"}},
		{dlq.Filter{WorkspaceID: "not a.valid*token"}, []string{"x"}},
		{dlq.Filter{Limit: 2}, []string{"a1", "b1"}},
	}
	for _, tc := range cases {
		got, err := dlq.List(ctx, js, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var acts []string
		for _, e := range got {
			acts = append(acts, e.DeadLetter.ActivityID)
		}
		if fmt.Sprint(acts) != fmt.Sprint(tc.want) {
			t.Errorf("List(%+v) = %v, want %v", tc.f, acts, tc.want)
		}
	}

	all, _ := dlq.List(ctx, js, dlq.Filter{})
	e, err := dlq.Get(ctx, js, all[1].Seq)
	if err != nil {
		t.Fatal(err)
	}
	if e.DeadLetter.ActivityID != "b1" || e.DeadLetter.Reason != events.ReasonMaxDeliveries || e.DeadLetter.Deliveries != 3 ||
		e.Subject != events.DLQSubject(events.StageDispatcher, wsB) || e.DeadLetter.FailedAt.IsZero() {
		t.Errorf("Get = %+v", e)
	}
	if _, err := dlq.Get(ctx, js, 999); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("Get(999) = %v, want ErrNotFound", err)
	}

	n, err := dlq.Purge(ctx, js, dlq.Filter{Reason: events.ReasonPermanent})
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2", n, err)
	}
	left, _ := dlq.List(ctx, js, dlq.Filter{})
	if len(left) != 2 {
		t.Fatalf("%d left after purge, want 2", len(left))
	}
	if n, err := dlq.Purge(ctx, js, dlq.Filter{}); err != nil || n != 2 {
		t.Fatalf("Purge all = %d, %v", n, err)
	}
}

func TestReplayRedeliversToTheDispatcher(t *testing.T) {
	t.Parallel()
	js, topo := setup(t, events.TopologyConfig{})
	ctx := bg(t)
	var broken atomic.Bool
	broken.Store(true)
	var runs atomic.Int32
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		runs.Add(1)
		if broken.Load() {
			return "", fmt.Errorf("%w: handler misconfigured", handler.ErrPermanent)
		}
		return "now it works", nil
	})
	d, err := dispatcher.New(js, topo, h, dispatcher.Config{Config: stage.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	in := events.Inbound{WorkspaceID: wsA, ActivityID: "act-1", Source: events.SourceCanvasUser, Text: "hi"}
	data, _ := in.Marshal()
	if _, err := js.Publish(ctx, events.InboundSubject(wsA), data, jetstream.WithMsgID(events.InboundMsgID(wsA, "act-1"))); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	entries, _ := dlq.List(ctx, js, dlq.Filter{})
	if len(entries) != 1 {
		t.Fatalf("%d dead letters, want 1", len(entries))
	}

	broken.Store(false)
	if err := dlq.Replay(ctx, js, entries[0].Seq); err != nil {
		t.Fatal(err)
	}
	// Replaying the same entry again finds nothing: it was deleted.
	if err := dlq.Replay(ctx, js, entries[0].Seq); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("second Replay = %v, want ErrNotFound", err)
	}
	st, err := d.Drain(ctx, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replied != 1 || runs.Load() != 2 {
		t.Fatalf("after replay: stats %+v, handler runs %d", st, runs.Load())
	}
	if left, _ := dlq.List(ctx, js, dlq.Filter{}); len(left) != 0 {
		t.Errorf("%d dead letters left after replay", len(left))
	}
}

func TestReplayClearsRecordsSoTheStageRunsAgain(t *testing.T) {
	t.Parallel()
	js, topo := setup(t, events.TopologyConfig{})
	ctx := bg(t)
	put := func(kv jetstream.KeyValue, key string, v any) {
		b, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	// Dispatcher: a handled record (say the message was republished after
	// an operator fixed something) is removed.
	put(topo.Handled, events.HandledKey(wsA, "d1"), events.HandledRecord{Outcome: events.OutcomeNoReply})
	// Replier: a "sent" record is removed (the operator asks for a re-send);
	// a "posting" record is kept so the replier reconciles instead of
	// posting blindly.
	put(topo.Replies, events.ReplyKey(wsA, "r-sent"), events.ReplyRecord{State: events.StateSent})
	put(topo.Replies, events.ReplyKey(wsA, "r-posting"), events.ReplyRecord{State: events.StatePosting})
	for i, dl := range []events.DeadLetter{
		deadLetter(events.StageDispatcher, wsA, "d1", events.ReasonPermanent, 11),
		deadLetter(events.StageReplier, wsA, "r-sent", events.ReasonPermanent, 12),
		deadLetter(events.StageReplier, wsA, "r-posting", events.ReasonAmbiguous, 13),
	} {
		if err := dlq.Publish(ctx, js, dl); err != nil {
			t.Fatal(err)
		}
		if err := dlq.Replay(ctx, js, uint64(i+1)); err != nil {
			t.Fatalf("Replay %s: %v", dl.ActivityID, err)
		}
	}
	if _, err := topo.Handled.Get(ctx, events.HandledKey(wsA, "d1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("handled record after replay: %v, want gone", err)
	}
	if _, err := topo.Replies.Get(ctx, events.ReplyKey(wsA, "r-sent")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("sent record after replay: %v, want gone", err)
	}
	if _, err := topo.Replies.Get(ctx, events.ReplyKey(wsA, "r-posting")); err != nil {
		t.Errorf("posting record after replay: %v, want kept", err)
	}
	// The envelopes are back on their original subjects, with replay ids.
	m, err := topo.Reply.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != events.ReplySubject(wsA) || m.Header.Get(jetstream.MsgIDHeader) != events.ReplyMsgID(wsA, "r-sent")+":replay:2" {
		t.Errorf("replayed reply on %s with id %q", m.Subject, m.Header.Get(jetstream.MsgIDHeader))
	}
	if info, _ := topo.Inbound.Info(ctx); info.State.Msgs != 1 {
		t.Errorf("inbound stream holds %d, want the replayed message", info.State.Msgs)
	}
}

func TestSweepMovesMessagesThatNeverGetAcked(t *testing.T) {
	t.Parallel()
	// A dispatcher that "dies" on every delivery: its crash hook abandons
	// the message (no ack, no nak), so it hits MaxDeliver by AckWait expiry
	// and would stay in the work queue forever without the sweep.
	js, topo := setup(t, events.TopologyConfig{DispatcherMaxDeliver: 2})
	ctx := bg(t)
	var runs atomic.Int32
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) { runs.Add(1); return "x", nil })
	d, err := dispatcher.New(js, topo, h, dispatcher.Config{Config: stage.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	in := events.Inbound{WorkspaceID: wsA, ActivityID: "act-crashy", Source: events.SourceCanvasUser, Text: "hi"}
	data, _ := in.Marshal()
	if _, err := js.Publish(ctx, events.InboundSubject(wsA), data); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	crashing := crashpoint.WithDispatcher(runCtx, &crashpoint.Dispatcher{
		AfterHandler: func(context.Context, *events.Inbound) error { return errors.New("crash") },
	})
	go func() { done <- d.Run(crashing) }()
	waitFor(t, 15*time.Second, "the max-delivered message in the DLQ", func() bool {
		e, _ := dlq.List(ctx, js, dlq.Filter{})
		return len(e) == 1
	})
	cancel()
	<-done
	e, _ := dlq.List(ctx, js, dlq.Filter{})
	dl := e[0].DeadLetter
	if dl.Reason != events.ReasonMaxDeliveries || dl.Stage != events.StageDispatcher || dl.ActivityID != "act-crashy" ||
		dl.Deliveries != 2 || dl.OriginalSeq != 1 || dl.OriginalSubject != events.InboundSubject(wsA) {
		t.Errorf("dead letter = %+v", dl)
	}
	waitFor(t, 5*time.Second, "the work queue to be empty", func() bool {
		info, _ := topo.Inbound.Info(ctx)
		return info.State.Msgs == 0
	})
	if runs.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", runs.Load())
	}
}

func TestSweepOnceFindsMessagesWhoseAdvisoryNobodyHeard(t *testing.T) {
	t.Parallel()
	js, topo := setup(t, events.TopologyConfig{DispatcherMaxDeliver: 2})
	ctx := bg(t)
	for i := range 2 {
		in := events.Inbound{WorkspaceID: wsB, ActivityID: fmt.Sprintf("lost-%d", i), Source: events.SourceCanvasUser, Text: "hi"}
		data, _ := in.Marshal()
		if _, err := js.Publish(ctx, events.InboundSubject(wsB), data); err != nil {
			t.Fatal(err)
		}
	}
	// Take each message twice without acking, with no sweeper listening.
	seen := 0
	waitFor(t, 10*time.Second, "four unacked deliveries", func() bool {
		b, err := topo.Dispatcher.Fetch(2, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for range b.Messages() {
			seen++
		}
		return seen >= 4
	})
	waitFor(t, 10*time.Second, "the server to give up on both messages", func() bool {
		// The server gives up on a message when it next looks for one
		// to deliver: a pull makes it look.
		b, err := topo.Dispatcher.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for range b.Messages() {
			t.Fatal("a max-delivered message was delivered again")
		}
		info, err := topo.Dispatcher.Info(ctx)
		return err == nil && info.NumAckPending == 0
	})
	n, err := dlq.SweepOnce(ctx, js, dlq.DispatcherTarget(topo))
	if err != nil || n != 2 {
		t.Fatalf("SweepOnce = %d, %v; want 2", n, err)
	}
	if info, _ := topo.Inbound.Info(ctx); info.State.Msgs != 0 {
		t.Errorf("inbound holds %d after the sweep", info.State.Msgs)
	}
	entries, _ := dlq.List(ctx, js, dlq.Filter{Reason: events.ReasonMaxDeliveries})
	if len(entries) != 2 || entries[0].DeadLetter.ActivityID != "lost-0" || entries[0].DeadLetter.Error != dlq.ErrorMaxDeliveriesUnacked {
		t.Fatalf("dead letters = %+v", entries)
	}
	// Nothing left to sweep; a second sweep is a no-op.
	if n, err := dlq.SweepOnce(ctx, js, dlq.DispatcherTarget(topo)); err != nil || n != 0 {
		t.Errorf("second SweepOnce = %d, %v", n, err)
	}
}

func TestEnvelopeOfKeepsJSONValid(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`{"a":1}`:  `{"a":1}`,
		`not json`: `"not json"`,
	}
	for in, want := range cases {
		if got := string(dlq.EnvelopeOf([]byte(in))); got != want {
			t.Errorf("EnvelopeOf(%q) = %s, want %s", in, got, want)
		}
	}
}
