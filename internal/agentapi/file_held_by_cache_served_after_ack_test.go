package agentapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestFileHeldByCacheServedAfterAck: on a 2026-05 platform an acked
// upload is 404, so once the attachment cache holds (and acked) a file,
// GET /v1/files serves the cache's copy; a workspace: URI is read through
// /chat/download, where a poll-mode workspace gets the platform's 422 as
// 501 with the reason.
func TestFileHeldByCacheServedAfterAck(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithGeneration(moleculetest.Gen2026_05)}})
	w.RegisterPoll(w.Agent)
	cache := &filecache.Cache{Dir: t.TempDir(), Clients: map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}}
	srv := startAPI(t, w, agentapi.Config{Files: cache})
	up := w.Plat.StageUpload(w.Agent.ID, "a.txt", "text/plain", []byte("held"))
	in := canvasMessage(w)
	in.Attachments = []events.Attachment{{URI: up.URI, Name: up.Name}, {URI: "workspace:/workspace/x.txt", Name: "x.txt"}}
	if f, _ := cache.Fetch(pipelinetest.Ctx(t), in); f[0].Error != "" {
		t.Fatalf("cache: %+v", f[0])
	}
	if st, _ := w.Plat.StagedUpload(up.FileID); !st.Acked {
		t.Fatal("not acked")
	}
	agent, end := srv.Open(pipelinetest.Ctx(t), in, time.Now().Add(time.Minute))
	defer end()
	base, tok := endpoint(t, agent)
	if st, b := call(t, http.MethodGet, base+"/v1/files?uri="+url.QueryEscape(up.URI), tok, ""); st != http.StatusOK || string(b) != "held" {
		t.Fatalf("held upload after ack: %d %q, want 200 from the cache", st, b)
	}
	if st, b := call(t, http.MethodGet, base+"/v1/files?uri="+url.QueryEscape("workspace:/workspace/x.txt"), tok, ""); st != http.StatusNotImplemented || !contains(b, "422") {
		t.Fatalf("workspace: file: %d %s, want 501 with the platform's 422", st, b)
	}
	if n := w.Requests("GET", "/chat/download", 0); n != 2 {
		t.Fatalf("%d /chat/download requests, want 2 (the cache's, refused, then this one)", n)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
