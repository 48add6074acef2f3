package stage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

const ws = "35637291-d55e-4553-896c-13c2e02fe4f7"

// env is one embedded NATS server with the topology; the stage under test
// reads the inbound stream with the dispatcher's consumer.
type env struct {
	js   jetstream.JetStream
	topo *events.Topology
}

func newEnv(t *testing.T, tc events.TopologyConfig) *env {
	t.Helper()
	if tc.DispatcherAckWait == 0 {
		tc.DispatcherAckWait = time.Second
	}
	tc.Storage = jetstream.MemoryStorage
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, tc)
	if err != nil {
		t.Fatalf("EnsureTopology: %v", err)
	}
	return &env{js: js, topo: topo}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

func (e *env) target() stage.Target { return dlq.DispatcherTarget(e.topo) }

func (e *env) publish(t *testing.T, n int) {
	t.Helper()
	e.publishFrom(t, 0, n)
}

// publishFrom publishes n messages with the message ids from, from+1, …
func (e *env) publishFrom(t *testing.T, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		m := &nats.Msg{Subject: events.InboundSubject(ws), Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("m-%d", i))
		if _, err := e.js.PublishMsg(ctx(t), m); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

func (e *env) left(t *testing.T) uint64 {
	t.Helper()
	ci, err := e.topo.Dispatcher.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return ci.NumPending + uint64(ci.NumAckPending)
}

func (e *env) runner(t *testing.T, cfg stage.Config, admit stage.Admission, p stage.Process) *stage.Runner {
	t.Helper()
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 100 * time.Millisecond
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase, cfg.RetryMax = 20*time.Millisecond, 100*time.Millisecond
	}
	r, err := stage.New(e.js, e.target(), cfg, 0, 0, admit, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDrainProcessesEveryMessageWithinConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 40)
	var running, most atomic.Int64
	r := e.runner(t, stage.Config{Concurrency: 4}, nil, func(ctx context.Context, d *stage.Delivery) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // work, so that the slots fill up
		running.Add(-1)
		if d.Meta == nil || d.Progress == nil {
			t.Error("delivery without metadata or progress")
		}
		_ = d.Msg.Ack()
	})
	st, err := r.Drain(ctx(t), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Received != 40 {
		t.Errorf("received %d, want 40", st.Received)
	}
	if m := most.Load(); m > 4 || m < 2 {
		t.Errorf("at most %d at once, want 2..4", m)
	}
	if n := e.left(t); n != 0 {
		t.Errorf("%d left on the consumer", n)
	}
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 3)
	var got atomic.Int64
	all := make(chan struct{})
	r := e.runner(t, stage.Config{}, nil, func(ctx context.Context, d *stage.Delivery) {
		_ = d.Msg.Ack()
		if got.Add(1) == 3 {
			close(all)
		}
	})
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("messages not processed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

func TestRetryRedeliversUntilLastDeliveryThenDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{DispatcherMaxDeliver: 3})
	e.publish(t, 1)
	var deliveries []uint64
	var mu sync.Mutex
	var r *stage.Runner
	r = e.runner(t, stage.Config{}, nil, func(ctx context.Context, d *stage.Delivery) {
		mu.Lock()
		deliveries = append(deliveries, d.Meta.NumDelivered)
		mu.Unlock()
		if r.LastDelivery(d) {
			d.WorkspaceID, d.ActivityID = ws, "act-1"
			r.DeadLetter(ctx, d, events.ReasonMaxDeliveries, errors.New("still failing"))
			return
		}
		r.Retry(d, 0)
	})
	st, err := r.Drain(ctx(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(deliveries) != 3 || deliveries[2] != 3 {
		t.Errorf("deliveries %v, want 1, 2, 3", deliveries)
	}
	if st.Retried != 2 || st.DeadLettered != 1 || st.Terminated != 1 || st.Received != 3 {
		t.Errorf("stats %+v", st)
	}
	entries, err := dlq.List(ctx(t), e.js, dlq.Filter{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("dead letters %v, %v; want one", entries, err)
	}
	dl := entries[0].DeadLetter
	if dl.Stage != events.StageDispatcher || dl.WorkspaceID != ws || dl.ActivityID != "act-1" || dl.Deliveries != 3 || dl.Reason != events.ReasonMaxDeliveries {
		t.Errorf("dead letter %+v", dl)
	}
}

func TestRetryHonoursALongerDelayCappedAtRetryMax(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 1)
	var mu sync.Mutex
	var times []time.Time
	var r *stage.Runner
	r = e.runner(t, stage.Config{RetryBase: 10 * time.Millisecond, RetryMax: 300 * time.Millisecond}, nil,
		func(ctx context.Context, d *stage.Delivery) {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			if d.Meta.NumDelivered == 1 {
				r.Retry(d, time.Hour) // capped at RetryMax
				return
			}
			_ = d.Msg.Ack()
		})
	if _, err := r.Drain(ctx(t), time.Second); err != nil {
		t.Fatal(err)
	}
	if len(times) != 2 {
		t.Fatalf("%d deliveries, want 2", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < 200*time.Millisecond || gap > 5*time.Second {
		t.Errorf("redelivered after %s, want about RetryMax (300ms)", gap)
	}
}

func TestAdmissionStopsFetchingUnderADeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 2)
	var processed atomic.Int64
	r := e.runner(t, stage.Config{StartMargin: time.Second}, func(left time.Duration) time.Duration {
		return left - time.Hour // nothing fits
	}, func(ctx context.Context, d *stage.Delivery) {
		processed.Add(1)
		_ = d.Msg.Ack()
	})
	c, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	st, err := r.Drain(c, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if processed.Load() != 0 || st.Received != 0 {
		t.Errorf("processed %d (stats %+v), want none", processed.Load(), st)
	}
	if !r.Fits(ctx(t), time.Hour) {
		t.Error("Fits without a deadline = false")
	}
	if r.Fits(c, time.Hour) {
		t.Error("Fits(1h) under a 30s deadline = true")
	}
}

func TestDeferHandsTheMessageBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	e.publish(t, 1)
	var r *stage.Runner
	r = e.runner(t, stage.Config{}, nil, func(ctx context.Context, d *stage.Delivery) {
		if d.Meta.NumDelivered == 1 {
			r.Defer(d, 0)
			return
		}
		r.Ack(ctx, d, r.Logger(), "nothing")
	})
	st, err := r.Drain(ctx(t), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deferred != 1 || st.Received != 2 {
		t.Errorf("stats %+v, want one deferred and two received", st)
	}
	if n := e.left(t); n != 0 {
		t.Errorf("%d left", n)
	}
}

func TestNewDerivesProgressIntervalAndValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{DispatcherAckWait: 3 * time.Second})
	p := func(context.Context, *stage.Delivery) {}
	r, err := stage.New(e.js, e.target(), stage.Config{}, 0, 0, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Config()
	if got.ProgressInterval != time.Second || got.Concurrency != stage.DefaultConcurrency || got.FetchBatch != got.Concurrency ||
		got.RetryBase != 2*time.Second || got.RetryMax != 5*time.Minute || got.StartMargin != 2*time.Second ||
		got.StoreTimeout != 30*time.Second || got.SweepInterval != time.Minute || got.FetchWait != time.Second {
		t.Errorf("defaults = %+v", got)
	}
	for _, cfg := range []stage.Config{
		{Concurrency: -1},
		{FetchBatch: -1},
		{RetryBase: time.Minute, RetryMax: time.Second},
		{StartMargin: -time.Second},
		{ProgressInterval: 5 * time.Second}, // >= AckWait 3s
	} {
		if _, err := stage.New(e.js, e.target(), cfg, 0, 0, nil, p); !errors.Is(err, stage.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := stage.New(e.js, e.target(), stage.Config{}, 0, 0, nil, nil); !errors.Is(err, stage.ErrInvalidConfig) {
		t.Errorf("New without a process = %v", err)
	}
}

// A stage started on a consumer that still has an earlier version's long
// AckWait, while its topology config says the short one, paces its
// keep-alives for the short one: they still hold once EnsureTopology
// lowers the consumer's AckWait under the running stage.
func TestNewPacesKeepAliveForTheShorterAckWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{DispatcherAckWait: 30 * time.Second})
	p := func(context.Context, *stage.Delivery) {}
	r, err := stage.New(e.js, e.target(), stage.Config{}, events.DefaultDispatcherAckWait, 0, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Config().ProgressInterval, events.DefaultDispatcherAckWait/3; got != want {
		t.Errorf("progress interval %s on a 30s consumer configured for %s, want %s", got, events.DefaultDispatcherAckWait, want)
	}
	// A consumer whose AckWait is shorter than the config's wins.
	e2 := newEnv(t, events.TopologyConfig{DispatcherAckWait: 3 * time.Second})
	if r, err = stage.New(e2.js, e2.target(), stage.Config{}, events.DefaultDispatcherAckWait, 0, nil, p); err != nil {
		t.Fatal(err)
	}
	if got := r.Config().ProgressInterval; got != time.Second {
		t.Errorf("progress interval %s on a 3s consumer, want 1s", got)
	}
	if _, err := stage.New(e.js, e.target(), stage.Config{ProgressInterval: 10 * time.Second}, events.DefaultDispatcherAckWait, 0, nil, p); !errors.Is(err, stage.ErrInvalidConfig) {
		t.Errorf("progress interval 10s against a configured AckWait of %s: %v, want ErrInvalidConfig", events.DefaultDispatcherAckWait, err)
	}
}

func TestChainWrapsFirstOutermost(t *testing.T) {
	var order []string
	mw := func(name string) stage.Middleware {
		return func(next stage.Process) stage.Process {
			return func(ctx context.Context, d *stage.Delivery) {
				order = append(order, name)
				next(ctx, d)
			}
		}
	}
	p := stage.Chain(func(context.Context, *stage.Delivery) { order = append(order, "process") }, mw("a"), mw("b"))
	p(context.Background(), &stage.Delivery{})
	if fmt.Sprint(order) != "[a b process]" {
		t.Errorf("order %v", order)
	}
}

func TestRetryDelayDoublesUpToTheCapWithJitter(t *testing.T) {
	for _, tc := range []struct {
		delivery uint64
		want     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {10, 30 * time.Second}} {
		for range 20 {
			got := stage.RetryDelay(time.Second, 30*time.Second, tc.delivery)
			if lo, hi := tc.want*8/10, tc.want*12/10; got < lo || got > hi {
				t.Errorf("RetryDelay(delivery %d) = %s, want %s ±20%%", tc.delivery, got, tc.want)
			}
		}
	}
}

// A run whose deadline leaves no room from its first pull on takes nothing:
// that is said once, at warn level; a run that had room and then reached
// its cut-off says nothing.
func TestDeadlineWithNoRoomFromTheStartIsLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	for _, tc := range []struct {
		name string
		need time.Duration // what the admission keeps back
		want int           // warnings
	}{
		{"no room", time.Hour, 1},
		{"room, then the cut-off", 1500 * time.Millisecond, 0},
	} {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		r := e.runner(t, stage.Config{StartMargin: 100 * time.Millisecond, Logger: log}, func(left time.Duration) time.Duration {
			return left - tc.need
		}, func(ctx context.Context, d *stage.Delivery) { _ = d.Msg.Ack() })
		c, cancel := context.WithTimeout(ctx(t), 2*time.Second)
		_, err := r.Drain(c, time.Minute)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(logs.String(), "leaves no room to start any work"); got != tc.want {
			t.Errorf("%s: %d warnings, want %d; logs:\n%s", tc.name, got, tc.want, logs.String())
		}
	}
}
