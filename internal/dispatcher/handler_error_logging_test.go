package dispatcher_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

type capturedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *capturedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *capturedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An http: handler server that refuses a request echoes it in its error
// body (FastAPI's default 422 answer carries the request under "input").
// The dispatcher logs the handler's error at warn level: the message text
// must not appear there (bodies are logged at debug only).
func TestHandlerErrorBodyNotLoggedAboveDebug(t *testing.T) {
	t.Parallel()
	const secretText = "my bank PIN is 4711, please remember it"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"detail":[{"type":"missing","loc":["body","prompt"],"msg":"Field required","input":` + string(body) + `}]}`))
	}))
	t.Cleanup(srv.Close)
	h, err := handler.Parse("http:"+srv.URL, handler.Options{})
	if err != nil {
		t.Fatal(err)
	}

	e := newEnv(t, events.TopologyConfig{})
	in := inbound(1)
	in.Text = secretText
	e.publish(t, in)
	var logs capturedLog
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{Concurrency: 1, Logger: log}})
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLettered != 1 {
		t.Fatalf("stats = %+v, want the message dead-lettered (422 is permanent)", st)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "4711") {
			t.Errorf("message text logged above debug: %s", line)
		}
	}
}
