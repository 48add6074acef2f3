package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

var quiet = slog.New(slog.DiscardHandler)

func echo(c *calls) handler.Func {
	return func(ctx context.Context, req *handler.Request) (string, error) {
		if c != nil {
			c.add(req.Message.ActivityID, req.Delivery)
		}
		return "echo: " + req.Message.Text, nil
	}
}

func newDispatcher(t *testing.T, js jetstream.JetStream, topo *events.Topology, h handler.Handler, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 50 * time.Millisecond
		cfg.RetryMax = 200 * time.Millisecond
	}
	d, err := dispatcher.New(js, topo, h, cfg)
	if err != nil {
		t.Fatalf("dispatcher.New: %v", err)
	}
	return d
}

func TestRepliesAreRoutedToTheSender(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	msgs := []events.Inbound{}
	for i := range 12 {
		in := inbound(i)
		switch i % 4 {
		case 1:
			in.Source, in.SourceWorkspaceID, in.Hops = events.SourcePeerAgent, peer, 1
			in.MessageID, in.ContextID, in.TaskID = fmt.Sprintf("their-msg-%d", i), "ctx-1", "task-1"
		case 2:
			in.Source = events.SourceSelf
		case 3:
			in.Cron = true
		}
		msgs = append(msgs, in)
		e.publish(t, in)
	}
	var c calls
	d := newDispatcher(t, e.js, e.topo, echo(&c), dispatcher.Config{})
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Handled != 12 || st.Replied != 12 || st.Received != 12 {
		t.Fatalf("stats = %+v, want 12 handled and replied", st)
	}
	got, ids := e.replies(t)
	if len(got) != len(msgs) {
		t.Fatalf("%d replies, want %d", len(got), len(msgs))
	}
	byAct := map[string]events.Reply{}
	for i, r := range got {
		byAct[r.ActivityID] = r
		if want := events.ReplyMsgID(r.WorkspaceID, r.ActivityID); ids[i] != want {
			t.Errorf("reply %s Nats-Msg-Id = %q, want %q", r.ActivityID, ids[i], want)
		}
	}
	for _, in := range msgs {
		r, ok := byAct[in.ActivityID]
		if !ok {
			t.Fatalf("no reply for %s", in.ActivityID)
		}
		wantTarget, wantInReplyToMsg := "", ""
		if in.Source == events.SourcePeerAgent {
			wantTarget, wantInReplyToMsg = peer, in.MessageID
		}
		if r.InReplyToMessageID != wantInReplyToMsg || r.ContextID != in.ContextID || r.TaskID != in.TaskID {
			t.Errorf("reply to %s: in_reply_to_message_id %q context %q task %q; want %q %q %q",
				in.ActivityID, r.InReplyToMessageID, r.ContextID, r.TaskID, wantInReplyToMsg, in.ContextID, in.TaskID)
		}
		if r.WorkspaceID != ws || r.Source != in.Source || r.TargetWorkspaceID != wantTarget ||
			r.Text != "echo: "+in.Text || r.MessageID != events.ReplyMessageID(in.ActivityID) ||
			r.Hops != in.Hops+1 || r.HandledAt.IsZero() || !r.InboundCreatedAt.Equal(in.CreatedAt) {
			t.Errorf("reply to %s = %+v", in.ActivityID, r)
		}
		if d := c.of(in.ActivityID); len(d) != 1 || d[0] != 1 {
			t.Errorf("handler deliveries for %s = %v, want [1]", in.ActivityID, d)
		}
	}
	if n := e.inboundLeft(t); n != 0 {
		t.Errorf("%d inbound messages left, want 0 (all acked)", n)
	}
}

// The concurrency bound: never more than Concurrency messages held by the
// dispatcher at once, counted from the handler's start until the message
// is about to be acked (its record and reply stored). The server's
// NumAckPending is not that count: a plain ack reaches the server a moment
// after the slot it frees is reused.
func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	const conc, n = 4, 40
	for i := range n {
		e.publish(t, inbound(i))
	}
	var handlers, handlersPeak, held, heldPeak atomic.Int64
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		raise(&heldPeak, held.Add(1))
		raise(&handlersPeak, handlers.Add(1))
		time.Sleep(15 * time.Millisecond) // the work being measured
		handlers.Add(-1)
		return "ok", nil
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{Concurrency: conc}})
	hooks := &crashpoint.Dispatcher{AfterReplyPublish: func(context.Context, *events.Inbound) error {
		held.Add(-1)
		return nil
	}}
	st, err := d.Drain(crashpoint.WithDispatcher(ctx(t), hooks), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Handled != n {
		t.Fatalf("handled %d, want %d", st.Handled, n)
	}
	if p := handlersPeak.Load(); p > conc || p < 2 {
		t.Errorf("peak concurrent handlers = %d, want 2..%d", p, conc)
	}
	if p := heldPeak.Load(); p > conc {
		t.Errorf("peak messages held from handler to ack = %d, want <= %d", p, conc)
	}
	// Every plain ack reached the server: nothing is left to redeliver.
	pipelinetest.Eventually(t, 5*time.Second, "the server's ack pending count back to 0", func() bool {
		info, err := e.topo.Dispatcher.Info(ctx(t))
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	if left := e.inboundLeft(t); left != 0 {
		t.Errorf("%d inbound messages left, want 0 (all acked)", left)
	}
}

// raise sets peak to v if v is higher.
func raise(peak *atomic.Int64, v int64) {
	for p := peak.Load(); v > p && !peak.CompareAndSwap(p, v); p = peak.Load() {
	}
}

var errCrash = errors.New("simulated crash")

// crashedStage runs a dispatcher on its own connection whose hooks "kill"
// it: the hook closes the connection, cancels the run context and makes
// the dispatcher abandon the message.
func crashedStage(t *testing.T, e *env, h handler.Handler, hooks func(kill func() error) *crashpoint.Dispatcher) {
	t.Helper()
	nc, js, topo := e.conn(t)
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	killed := make(chan struct{})
	kill := func() error {
		once.Do(func() {
			nc.Close()
			cancel()
			close(killed)
		})
		return errCrash
	}
	d := newDispatcher(t, js, topo, h, dispatcher.Config{})
	done := make(chan error, 1)
	go func() { done <- d.Run(crashpoint.WithDispatcher(runCtx, hooks(kill))) }()
	select {
	case <-killed:
	case <-time.After(10 * time.Second):
		t.Fatal("the crash point was never reached")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("crashed dispatcher did not stop")
	}
}

func TestCrashPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		hooks func(kill func() error) *crashpoint.Dispatcher
		// wantRuns are the deliveries the handler saw across both stages.
		wantRuns []uint64
		wantDup  uint64
	}{
		{"mid handler", func(kill func() error) *crashpoint.Dispatcher {
			return &crashpoint.Dispatcher{AfterHandler: func(context.Context, *events.Inbound) error { return kill() }}
		}, []uint64{1, 2}, 0},
		{"after record before publish", func(kill func() error) *crashpoint.Dispatcher {
			return &crashpoint.Dispatcher{AfterRecord: func(context.Context, *events.Inbound) error { return kill() }}
		}, []uint64{1}, 1},
		{"after reply publish before ack", func(kill func() error) *crashpoint.Dispatcher {
			return &crashpoint.Dispatcher{AfterReplyPublish: func(context.Context, *events.Inbound) error { return kill() }}
		}, []uint64{1}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, events.TopologyConfig{})
			var c calls
			in := inbound(1)
			e.publish(t, in)
			crashedStage(t, e, echo(&c), tc.hooks)

			// A new process takes over; the message comes back after AckWait.
			_, js, topo := e.conn(t)
			d := newDispatcher(t, js, topo, echo(&c), dispatcher.Config{})
			runCtx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(runCtx) }()
			waitFor(t, 10*time.Second, "the message to be acked", func() bool { return e.inboundLeft(t) == 0 })
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := c.of(in.ActivityID); fmt.Sprint(got) != fmt.Sprint(tc.wantRuns) {
				t.Errorf("handler deliveries = %v, want %v", got, tc.wantRuns)
			}
			if got := d.Stats().Duplicates; got != tc.wantDup {
				t.Errorf("duplicates = %d, want %d", got, tc.wantDup)
			}
			reps, _ := e.replies(t)
			if len(reps) != 1 {
				t.Fatalf("%d replies in the reply stream, want exactly 1", len(reps))
			}
		})
	}
}

func TestHandledRecordStopsASecondRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	var c calls
	in := inbound(7)
	e.publish(t, in)
	d := newDispatcher(t, e.js, e.topo, echo(&c), dispatcher.Config{})
	if _, err := d.Drain(ctx(t), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The same activity published again after the duplicate window (the
	// poller re-seeding after a lost cursor): the handled record stops a
	// second handler run.
	e.publishRaw(t, events.InboundSubject(ws), mustMarshal(t, in), "")
	st, err := d.Drain(ctx(t), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Duplicates != 1 || st.Handled != 0 {
		t.Fatalf("second drain stats = %+v, want one duplicate and no handler run", st)
	}
	if got := c.of(in.ActivityID); len(got) != 1 {
		t.Fatalf("handler ran %d times, want 1", len(got))
	}
	if reps, _ := e.replies(t); len(reps) != 1 {
		t.Fatalf("%d replies, want 1 (republish de-duplicated)", len(reps))
	}
}

func mustMarshal(t *testing.T, in events.Inbound) []byte {
	t.Helper()
	b, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRetryableErrorIsRedeliveredWithDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	var c calls
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		c.add(req.Message.ActivityID, req.Delivery)
		if req.Delivery == 1 {
			return "", errors.New("upstream busy")
		}
		return "second time lucky", nil
	})
	in := inbound(1)
	e.publish(t, in)
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{RetryBase: 300 * time.Millisecond, RetryMax: time.Second}})
	start := time.Now()
	st, err := d.Drain(ctx(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.of(in.ActivityID); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("deliveries = %v, want [1 2]", got)
	}
	if st.Retried != 1 || st.HandlerErrors != 1 || st.Replied != 1 {
		t.Fatalf("stats = %+v", st)
	}
	// 300ms ±20% jitter before the redelivery.
	if el := time.Since(start); el < 240*time.Millisecond {
		t.Errorf("redelivered after %s, want the nak delay honoured", el)
	}
	if reps, _ := e.replies(t); len(reps) != 1 || reps[0].Text != "second time lucky" {
		t.Fatalf("replies = %+v", reps)
	}
}

func TestPermanentErrorIsDeadLetteredAndDoesNotStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	var c calls
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		c.add(req.Message.ActivityID, req.Delivery)
		if req.Message.Text == "poison" {
			return "", fmt.Errorf("%w: cannot parse", handler.ErrPermanent)
		}
		return "fine", nil
	})
	bad := inbound(1)
	bad.Text = "poison"
	e.publish(t, bad)
	for i := 2; i <= 4; i++ {
		e.publish(t, inbound(i))
	}
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{Concurrency: 1}})
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLettered != 1 || st.Terminated != 1 || st.Replied != 3 {
		t.Fatalf("stats = %+v", st)
	}
	if got := c.of(bad.ActivityID); len(got) != 1 {
		t.Errorf("poison handled %d times, want 1", len(got))
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0].DeadLetter
	if dl.Stage != events.StageDispatcher || dl.Reason != events.ReasonPermanent || dl.ActivityID != bad.ActivityID ||
		dl.Deliveries != 1 || !strings.Contains(dl.Error, "cannot parse") || dl.OriginalSubject != events.InboundSubject(ws) ||
		dl.OriginalStream != events.StreamInbound || dl.OriginalSeq != 1 {
		t.Errorf("dead letter = %+v", dl)
	}
	var env events.Inbound
	if err := json.Unmarshal(dl.Envelope, &env); err != nil || env.Text != "poison" {
		t.Errorf("dead letter envelope = %s (%v)", dl.Envelope, err)
	}
	if n := e.inboundLeft(t); n != 0 {
		t.Errorf("%d inbound messages left, want 0", n)
	}
}

func TestExhaustedDeliveriesAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{DispatcherMaxDeliver: 3})
	var c calls
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		c.add(req.Message.ActivityID, req.Delivery)
		return "", errors.New("always failing")
	})
	in := inbound(1)
	e.publish(t, in)
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{})
	st, err := d.Drain(ctx(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.of(in.ActivityID); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("deliveries = %v, want [1 2 3]", got)
	}
	if st.Retried != 2 || st.DeadLettered != 1 {
		t.Fatalf("stats = %+v", st)
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 || dls[0].DeadLetter.Reason != events.ReasonMaxDeliveries || dls[0].DeadLetter.Deliveries != 3 {
		t.Fatalf("dead letters = %+v", dls)
	}
	if n := e.inboundLeft(t); n != 0 {
		t.Errorf("%d inbound messages left, want 0", n)
	}
}

func TestMalformedEnvelopesAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publishRaw(t, events.InboundSubject(ws), []byte("not json at all"), "bad-1")
	e.publishRaw(t, events.InboundSubject(ws), []byte(`{"workspace_id":"x","activity_id":"y"}`), "bad-2")            // no "v"
	e.publishRaw(t, events.InboundSubject(ws), []byte(`{"v":1,"workspace_id":"`+ws+`","activity_id":"z"}`), "bad-3") // no source
	good := inbound(9)
	e.publish(t, good)
	var c calls
	d := newDispatcher(t, e.js, e.topo, echo(&c), dispatcher.Config{Config: stage.Config{Concurrency: 1}})
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLettered != 3 || st.Replied != 1 || c.total() != 1 {
		t.Fatalf("stats = %+v, handler calls %d", st, c.total())
	}
	for _, en := range e.deadLetters(t) {
		if en.DeadLetter.Reason != events.ReasonMalformed || en.DeadLetter.WorkspaceID == "" {
			t.Errorf("dead letter = %+v", en.DeadLetter)
		}
	}
}

func TestLoopGuard(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		inReplyTo      string
		hops           int
		role           string
		replyToReplies bool
		wantReply      bool
	}{
		{"plain peer message", "", 0, "user", false, true},
		{"peer message without role", "", 0, "", false, true},
		{"reply refused by default", "act-mine", 1, "agent", false, false},
		{"reply allowed when configured", "act-mine", 1, "agent", true, true},
		{"hop cap", "act-mine", 3, "agent", true, false},
		{"hop cap without in_reply_to", "", 3, "user", false, false},
		// Another SDK's answer: role agent, none of our metadata.
		{"unmarked agent answer refused by default", "", 0, "agent", false, false},
		{"unmarked agent answer allowed when configured", "", 0, "agent", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, events.TopologyConfig{})
			in := inbound(1)
			in.Source, in.SourceWorkspaceID, in.InReplyTo, in.Hops, in.Role = events.SourcePeerAgent, peer, tc.inReplyTo, tc.hops, tc.role
			e.publish(t, in)
			var c calls
			d := newDispatcher(t, e.js, e.topo, echo(&c), dispatcher.Config{ReplyToReplies: tc.replyToReplies})
			st, err := d.Drain(ctx(t), 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			reps, _ := e.replies(t)
			if got := len(reps) == 1; got != tc.wantReply {
				t.Fatalf("reply published = %v, want %v (stats %+v)", got, tc.wantReply, st)
			}
			if c.total() != 1 {
				t.Errorf("handler ran %d times, want 1 (the agent still sees the message)", c.total())
			}
			if !tc.wantReply && st.Skipped != 1 {
				t.Errorf("skipped = %d, want 1", st.Skipped)
			}
			entry, err := e.topo.Handled.Get(ctx(t), events.HandledKey(ws, in.ActivityID))
			if err != nil {
				t.Fatalf("handled record: %v", err)
			}
			var rec events.HandledRecord
			if err := json.Unmarshal(entry.Value(), &rec); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: events.OutcomeReplied, false: events.OutcomeSuppressed}[tc.wantReply]; rec.Outcome != want {
				t.Errorf("record outcome = %q, want %q", rec.Outcome, want)
			}
		})
	}
}

func TestEmptyReplyMeansNoReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, inbound(1))
	d := newDispatcher(t, e.js, e.topo, handler.Func(func(context.Context, *handler.Request) (string, error) { return "", nil }), dispatcher.Config{})
	st, err := d.Drain(ctx(t), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.NoReply != 1 || st.Replied != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if reps, _ := e.replies(t); len(reps) != 0 {
		t.Fatalf("%d replies, want none", len(reps))
	}
}

func TestHandlerPanicIsRetriedNotFatal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, inbound(1))
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		if req.Delivery == 1 {
			panic("boom")
		}
		return "recovered", nil
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{})
	st, err := d.Drain(ctx(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.HandlerErrors != 1 || st.Replied != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestHandlerSeesDeadlineAndProgressKeepsMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{}) // AckWait 1s
	e.publish(t, inbound(1))
	var c calls
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		c.add(req.Message.ActivityID, req.Delivery)
		dl, ok := ctx.Deadline()
		if !ok || !dl.Equal(req.Deadline) {
			return "", fmt.Errorf("%w: ctx deadline %v, request deadline %v", handler.ErrPermanent, dl, req.Deadline)
		}
		req.Progress()
		// Longer than AckWait: the progress ticker must keep it ours.
		select {
		case <-time.After(2500 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "slow but sure", nil
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{HandlerTimeout: 10 * time.Second})
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replied != 1 || c.total() != 1 || st.Duplicates != 0 {
		t.Fatalf("stats = %+v, handler runs %d", st, c.total())
	}
}

func TestDrainReturnsWhenIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	d := newDispatcher(t, e.js, e.topo, echo(nil), dispatcher.Config{})
	start := time.Now()
	st, err := d.Drain(ctx(t), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Drain on an empty queue took %s", el)
	}
	if st.Received != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestDrainHonoursStartMargin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, inbound(1))
	var c calls
	d := newDispatcher(t, e.js, e.topo, echo(&c), dispatcher.Config{Config: stage.Config{StartMargin: time.Second}, HandlerTimeout: 5 * time.Second})

	// 2s left < 5s + 1s: no handler may start.
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	st, err := d.Drain(short, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.total() != 0 || st.Received != 0 {
		t.Fatalf("handler ran %d times (stats %+v) with no room before the deadline", c.total(), st)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Drain took %s to notice it had no room", el)
	}

	// 10s left >= 5s + 1s: it runs.
	long, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	st, err = d.Drain(long, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c.total() != 1 || st.Replied != 1 {
		t.Fatalf("handler ran %d times (stats %+v), want 1", c.total(), st)
	}
}

func TestRunStopsCleanlyAndFinishesInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	started := make(chan struct{})
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		close(started)
		<-release
		return "finished after stop", nil
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	e.publish(t, inbound(1))
	<-started
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil on a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if st := d.Stats(); st.Replied != 1 {
		t.Fatalf("stats = %+v, want the in-flight message finished", st)
	}
	if n := e.inboundLeft(t); n != 0 {
		t.Errorf("%d inbound left, want 0", n)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	cases := []dispatcher.Config{
		{Config: stage.Config{Concurrency: -1}},
		{MaxHops: -2},
		{Config: stage.Config{RetryBase: time.Minute, RetryMax: time.Second}},
		{Config: stage.Config{ProgressInterval: 5 * time.Second}}, // >= AckWait 1s
	}
	for _, cfg := range cases {
		if _, err := dispatcher.New(e.js, e.topo, echo(nil), cfg); !errors.Is(err, dispatcher.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	d, err := dispatcher.New(e.js, e.topo, echo(nil), dispatcher.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Config(); got.Concurrency != 16 || got.HandlerTimeout != 5*time.Minute || got.ProgressInterval != time.Second/3 ||
		got.MaxHops != 3 || got.RetryBase != 2*time.Second || got.RetryMax != 5*time.Minute || got.StartMargin != 2*time.Second {
		t.Errorf("defaults = %+v", got)
	}
}
