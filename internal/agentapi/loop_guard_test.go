package agentapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// TestPeerInterimRefusedByLoopGuard: a peer message the dispatcher would
// not answer (itself a reply, a peer's role "agent" answer, or at the hop
// limit) gets no interim either (409), so two agents whose handlers post
// interims cannot message each other forever; an ordinary peer message
// gets its interim.
func TestPeerInterimRefusedByLoopGuard(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	srv := startAPI(t, w, agentapi.Config{LoopGuard: func(in *events.Inbound) string { return dispatcher.LoopGuard(in, false, 3) }})
	peer := w.Peers[0]
	fromPeer := func(mod func(*events.Inbound)) *events.Inbound {
		in := &events.Inbound{V: events.Version, WorkspaceID: w.Agent.ID, ActivityID: uuid.NewString(), Source: events.SourcePeerAgent, SourceWorkspaceID: peer.ID, Role: "user", Text: "hi"}
		mod(in)
		return in
	}
	for _, tt := range []struct {
		name string
		in   *events.Inbound
		want int
	}{
		{"a reply", fromPeer(func(in *events.Inbound) { in.InReplyTo = uuid.NewString() }), http.StatusConflict},
		{"a role agent answer", fromPeer(func(in *events.Inbound) { in.Role = "agent" }), http.StatusConflict},
		{"at the hop limit", fromPeer(func(in *events.Inbound) { in.Hops = 3 }), http.StatusConflict},
		{"an ordinary message", fromPeer(func(*events.Inbound) {}), http.StatusOK},
	} {
		before := len(w.Plat.A2ACalls(peer.ID))
		agent, end := srv.Open(pipelinetest.Ctx(t), tt.in, time.Now().Add(time.Minute))
		url, tok := endpoint(t, agent)
		st, body := call(t, http.MethodPost, url+"/v1/interim", tok, `{"text":"working"}`)
		end()
		if st != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, st, body, tt.want)
		}
		sent := len(w.Plat.A2ACalls(peer.ID)) - before
		if (tt.want == http.StatusOK) != (sent == 1) || sent > 1 {
			t.Errorf("%s: %d interims reached the peer", tt.name, sent)
		}
		if tt.want == http.StatusConflict && !strings.Contains(string(body), "loop guard") {
			t.Errorf("%s: error %s does not say why", tt.name, body)
		}
	}
}
