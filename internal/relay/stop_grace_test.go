package relay_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// A handler that outlasts MOLECULE_STOP_GRACE is cut near its end: Run
// returns inside the grace, the handler's request is cancelled, the stop
// says what it left, and the message, handed back, is answered once by
// the next run.
func TestStopCutsHandlerAtTheEndOfTheGrace(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	var answer atomic.Bool
	called := make(chan struct{}, 10)
	cut := make(chan struct{}, 10)
	testDone := make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		// Read to the end: only then does the server notice the client
		// hang up (the cut) and cancel r.Context().
		_, _ = io.Copy(io.Discard, r.Body)
		called <- struct{}{}
		if answer.Load() {
			_, _ = rw.Write([]byte(`{"reply":"answered after the restart"}`))
			return
		}
		select { // never answers: only the stop's cut ends it
		case <-r.Context().Done():
			cut <- struct{}{}
		case <-testDone:
		}
	}))
	t.Cleanup(agent.Close)
	t.Cleanup(func() { close(testDone) }) // runs first: frees a handler never cut
	var logs pipelinetest.LogBuffer
	rt := openRelay(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID="+w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"MOLECULE_HANDLER=http:"+agent.URL,
		"MOLECULE_POLL_INTERVAL=200ms",
		"MOLECULE_STOP_GRACE=2s",
		"NATS_URL="+w.NATSURL(),
	)
	if rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond); err != nil || !rep.OK() {
		t.Fatalf("first Once (registers, seeds the cursor): %v %+v", err, rep)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx, relay.All) }()
	w.SendCanvas("a long job")
	select {
	case <-called:
	case <-time.After(15 * time.Second):
		t.Fatal("the handler was not called")
	}
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after the stop: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of the stop")
	}
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("Run returned %s after the stop, beyond the 2 s grace", took.Round(time.Millisecond))
	}
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatalf("the handler's request was not cancelled by the end of the grace\n%s", logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "handlers_cut=1") || !strings.Contains(l, "work left for the next start") {
		t.Errorf("the stop does not say it cut a handler:\n%s", l)
	}
	if w.Replies() != 0 {
		t.Fatalf("%d replies before the handler ever answered", w.Replies())
	}

	// The next run gets the message back at once and answers it once.
	answer.Store(true)
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- rt.Run(ctx, relay.All) }()
	w.WaitReplies(1, 15*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if n := w.Plat.Notifications(w.Agent.ID); len(n) != 1 || n[0].Message != "answered after the restart" {
		t.Fatalf("notifications %+v, want the one answer of the handed-back message", n)
	}
}
