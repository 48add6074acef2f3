package lambdafn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// sigtermWorld is a poller and a dispatcher function on one workspace of
// the platform double, whose handler sleeps far past any SIGTERM budget.
type sigtermWorld struct {
	plat      *moleculetest.Server
	ws        moleculetest.Workspace
	js        jetstream.JetStream
	poller    *Function
	dispatch  *Function
	handlerUp string // a file the handler creates when it starts
}

func newSIGTERMWorld(t *testing.T) *sigtermWorld {
	t.Helper()
	w := &sigtermWorld{plat: moleculetest.NewServer()}
	t.Cleanup(w.plat.Close)
	w.ws = w.plat.CreateWorkspace("sigterm")
	ns := natstest.Start(t)
	_, w.js = natstest.Connect(t, ns.ClientURL())
	dir := t.TempDir()
	w.handlerUp = filepath.Join(dir, "handler-started")
	agent := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\ntouch "+w.handlerUp+"\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + w.plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + w.ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + w.ws.Token,
		"MOLECULE_HANDLER=exec:" + agent,
		"MOLECULE_HANDLER_TIMEOUT=2m",
		"MOLECULE_SSE=false",
		"MOLECULE_POLLER_WINDOW=false",
		"MOLECULE_DRAIN_IDLE=300ms",
		"MOLECULE_DRAIN_MARGIN=1s",
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.poller, w.dispatch = New(Poller, environ, log), New(Dispatcher, environ, log)
	t.Cleanup(w.poller.Close)
	t.Cleanup(w.dispatch.Close)
	return w
}

func (w *sigtermWorld) invoke(t *testing.T, f *Function) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return f.Invoke(ctx, nil)
}

// queued publishes one message to the inbound stream through the poller.
func (w *sigtermWorld) queued(t *testing.T) {
	t.Helper()
	if _, err := w.invoke(t, w.poller); err != nil { // registers and seeds the cursor
		t.Fatal(err)
	}
	if st, body, err := w.plat.SendCanvas(context.Background(), w.ws.ID, "take your time"); err != nil || st != 200 {
		t.Fatalf("send: %d %s %v", st, body, err)
	}
	if res, err := w.invoke(t, w.poller); err != nil || res.Published != 1 {
		t.Fatalf("poll: %+v %v", res, err)
	}
}

// notLost fetches the message as another dispatcher would. The cut hands
// it back, but the stage's pull that is still open may take it once more
// before it ends (then the stage hands it back for after the pull's end),
// or before the connection closes (then it comes back after its AckWait,
// 8 s): one delivery more at most, never MaxDeliver's worth, which would
// dead-letter a message no handler finished.
func (w *sigtermWorld) notLost(t *testing.T) {
	t.Helper()
	cons, err := w.js.Consumer(context.Background(), events.StreamInbound, events.ConsumerDispatcher)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(events.DefaultDispatcherAckWait+5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := <-batch.Messages(); ok {
		md, err := m.Metadata()
		if err != nil || md.NumDelivered < 2 || md.NumDelivered > 3 {
			t.Fatalf("the message came back with metadata %+v (%v), want its second or third delivery", md, err)
		}
		return
	}
	ci, _ := cons.Info(context.Background())
	dlq, _ := w.js.Stream(context.Background(), events.StreamDLQ)
	var dlqMsgs uint64
	if dlq != nil {
		dlqMsgs = dlq.CachedInfo().State.Msgs
	}
	t.Fatalf("the message did not come back after SIGTERM (%v); consumer %+v; dead letters %d", batch.Error(), ci, dlqMsgs)
}

// SIGTERM during an invocation (Lambda resets an environment whose
// invocation timed out or crashed the same way it shuts an idle one down)
// used to wait for the invocation's lock: a handler running for a minute
// kept it past the 500 ms Lambda gives, and SIGKILL came first. Now the
// invocation is cut (its handler too), hands its message back, returns,
// and the connection is closed inside the budget.
func TestSIGTERMDuringInvocationCutsItWithinBudget(t *testing.T) {
	w := newSIGTERMWorld(t)
	w.queued(t)
	invoked := make(chan struct{})
	go func() {
		defer close(invoked)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _ = w.dispatch.Invoke(ctx, nil) // cut: what it reports no longer matters
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(w.handlerUp); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the handler did not start within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	w.dispatch.Close()
	// The budget is Lambda's 500 ms; the bound leaves room for a loaded
	// machine, and is far below the minute the handler would take.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("SIGTERM handler took %s during an invocation", took)
	}
	select {
	case <-invoked:
	case <-time.After(5 * time.Second):
		t.Fatal("the invocation still runs 5 s after SIGTERM")
	}
	w.notLost(t)
	if w.dispatch.conn.Load() != nil {
		t.Error("the runtime is still set after SIGTERM")
	}
}

// Between invocations, SIGTERM closes the connection the environment kept.
func TestSIGTERMBetweenInvocationsClosesTheConnection(t *testing.T) {
	w := newSIGTERMWorld(t)
	if _, err := w.invoke(t, w.poller); err != nil {
		t.Fatal(err)
	}
	c := w.poller.conn.Load()
	if c == nil {
		t.Fatal("no connection kept after the invocation")
	}
	w.poller.Close()
	if !c.NC.IsClosed() || w.poller.conn.Load() != nil {
		t.Fatalf("after SIGTERM: connection closed %v, kept %v", c.NC.IsClosed(), w.poller.conn.Load() != nil)
	}
}

// An invocation that does not stop when cut (a step that ignores its
// context) does not hold SIGTERM up either: after sigtermInvocationWait
// its connection is flushed and closed under it.
func TestSIGTERMDoesNotWaitForAnInvocationThatKeepsItsLock(t *testing.T) {
	w := newSIGTERMWorld(t)
	if _, err := w.invoke(t, w.poller); err != nil {
		t.Fatal(err)
	}
	c := w.poller.conn.Load()
	ctx, end := w.poller.begin(context.Background())
	w.poller.mu.Lock() // the invocation that keeps running
	start := time.Now()
	w.poller.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("SIGTERM handler took %s", took)
	}
	if !c.NC.IsClosed() {
		t.Error("the connection is still open after SIGTERM")
	}
	if !errors.Is(context.Cause(ctx), errSIGTERM) {
		t.Errorf("the invocation's context ended with %v, want errSIGTERM", context.Cause(ctx))
	}
	w.poller.mu.Unlock()
	end()
}
