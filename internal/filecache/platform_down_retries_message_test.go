package filecache_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestPlatformDownRetriesMessage: while the platform fails to serve an
// attachment the dispatcher does not run the handler with a reason but
// tries the message again (3 failed deliveries of 5); the handler runs
// once, with the file held. A platform down for every delivery: the last
// one runs the handler with the reason rather than dropping the message.
func TestPlatformDownRetriesMessage(t *testing.T) {
	for _, tc := range []struct {
		failures int
		held     bool
	}{{3, true}, {100, false}} {
		runPlatformDown(t, tc.failures, tc.held)
	}
}

func runPlatformDown(t *testing.T, failures int, held bool) {
	w := pipelinetest.New(t, pipelinetest.Options{Topology: events.TopologyConfig{DispatcherMaxDeliver: 5}})
	up := w.Plat.StageUpload(w.Agent.ID, "a.txt", "text/plain", []byte("eventually"))
	w.Plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + w.Agent.ID + "/pending-uploads/", Status: http.StatusServiceUnavailable, Count: failures})
	var mu sync.Mutex
	var seen [][]handler.File
	h := handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req.Files)
		return "ok", nil
	})
	cache := &filecache.Cache{Dir: filepath.Join(t.TempDir(), "cache"), Clients: map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Files: cache}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	sendWithFile(t, w, "read it", up.URI, up.Name)
	pipelinetest.Eventually(t, 30*time.Second, "answer posted", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || len(seen[0]) != 1 || (seen[0][0].Path != "") != held || (seen[0][0].Error == "") != held {
		t.Fatalf("%d failures: handler runs %+v; want one, the file held: %v", failures, seen, held)
	}
	if n, want := w.Requests("GET", "/pending-uploads/", http.StatusServiceUnavailable), min(failures, 5); n != want {
		t.Fatalf("%d failed fetches, want %d (one a delivery)", n, want)
	}
}
