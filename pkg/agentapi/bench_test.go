package agentapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/pipelinetest"
	"github.com/molecule-ai/molecule-relay/internal/uuid"
	"github.com/molecule-ai/molecule-relay/pkg/agentapi"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// BenchmarkSessionOpenEnd is what the agent API adds to every handler
// run: minting a capability token, opening and ending its session.
func BenchmarkSessionOpenEnd(b *testing.B) {
	srv, err := agentapi.New(agentapi.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	in := &events.Inbound{V: events.Version, WorkspaceID: uuid.New(), ActivityID: uuid.New(), Source: events.SourceCanvasUser}
	deadline := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		_, end := srv.Open(context.Background(), in, deadline)
		end()
	}
}

// BenchmarkPeersCachedRoundTrip is one authorised call over loopback
// HTTP that the API answers from its cache (GET /v1/peers).
func BenchmarkPeersCachedRoundTrip(b *testing.B) {
	w := pipelinetest.New(b, pipelinetest.Options{Peers: 1})
	srv := startAPI(b, w, agentapi.Config{})
	agent, end := srv.Open(pipelinetest.Ctx(b), canvasMessage(w), time.Now().Add(time.Hour))
	defer end()
	url, tok := endpoint(b, agent)
	if st, body := call(b, http.MethodGet, url+"/v1/peers", tok, ""); st != http.StatusOK {
		b.Fatalf("%d %s", st, body)
	}
	for b.Loop() {
		if st, _ := call(b, http.MethodGet, url+"/v1/peers", tok, ""); st != http.StatusOK {
			b.Fatal(st)
		}
	}
}
