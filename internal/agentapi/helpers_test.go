package agentapi_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// startAPI starts an agent API for w's agent workspace on 127.0.0.1,
// recording canvas interims in the handled bucket. cfg's Clients and
// Records are filled when unset.
func startAPI(t testing.TB, w *pipelinetest.World, cfg agentapi.Config) *agentapi.Server {
	t.Helper()
	if cfg.Clients == nil {
		cfg.Clients = map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}
	}
	if cfg.Records == nil {
		cfg.Records = w.Obs.Topo.Handled
	}
	if cfg.Logger == nil {
		cfg.Logger = pipelinetest.Logger()
	}
	srv, err := agentapi.New(cfg)
	if err != nil {
		t.Fatalf("agentapi.New: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// canvasMessage is an inbound canvas message of w's agent, as the
// dispatcher hands it to Open.
func canvasMessage(w *pipelinetest.World) *events.Inbound {
	return &events.Inbound{V: events.Version, WorkspaceID: w.Agent.ID, ActivityID: uuid.NewString(), Source: events.SourceCanvasUser, Text: "hi"}
}

// endpoint is the URL and capability token of a session.
func endpoint(t testing.TB, a handler.Agent) (string, string) {
	t.Helper()
	e, ok := a.(handler.AgentEndpoint)
	if !ok {
		t.Fatalf("%T is not a handler.AgentEndpoint", a)
	}
	return e.Endpoint()
}

// call sends one request to the agent API with token as the bearer ("":
// none) and returns the status and body.
func call(t testing.TB, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(pipelinetest.Ctx(t), method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// script writes an executable /bin/sh script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
