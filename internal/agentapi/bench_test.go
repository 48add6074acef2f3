package agentapi_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
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
	in := &events.Inbound{V: events.Version, WorkspaceID: uuid.NewString(), ActivityID: uuid.NewString(), Source: events.SourceCanvasUser}
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

// BenchmarkFileThroughAPI reads a 4 MiB staged upload through GET
// /v1/files: platform double -> relay -> handler, all over loopback HTTP.
func BenchmarkFileThroughAPI(b *testing.B) {
	w := pipelinetest.New(b, pipelinetest.Options{})
	srv := startAPI(b, w, agentapi.Config{})
	content := make([]byte, 4<<20)
	up := w.Plat.StageUpload(w.Agent.ID, "big.bin", "application/octet-stream", content)
	in := canvasMessage(w)
	in.Attachments = []events.Attachment{{URI: up.URI, Name: up.Name}}
	agent, end := srv.Open(pipelinetest.Ctx(b), in, time.Now().Add(time.Hour))
	defer end()
	base, tok := endpoint(b, agent)
	u := base + "/v1/files?uri=" + url.QueryEscape(up.URI)
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if st, body := call(b, http.MethodGet, u, tok, ""); st != http.StatusOK || len(body) != len(content) {
			b.Fatalf("%d, %d bytes", st, len(body))
		}
	}
}
