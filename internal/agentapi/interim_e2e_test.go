package agentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// a2aMessage is the part of an A2A call's body the tests read.
type a2aMessage struct {
	Role      string `json:"role"`
	MessageID string `json:"messageId"`
	Parts     []struct {
		Text string `json:"text"`
	} `json:"parts"`
	Metadata map[string]any `json:"metadata"`
}

func messagesTo(t *testing.T, calls []moleculetest.A2ACall) []a2aMessage {
	t.Helper()
	var out []a2aMessage
	for _, c := range calls {
		var b struct {
			Params struct {
				Message a2aMessage `json:"message"`
			} `json:"params"`
		}
		if err := json.Unmarshal(c.Body, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Params.Message)
	}
	return out
}

// TestInterimThenFinalAnswer: an exec: program posts an interim message
// through the HTTP API with curl, then answers. The canvas user and the
// peer each get the interim first, then the answer; the peer's interim
// is an agent message marked as a reply to the activity (so the peer's
// loop guard does not answer it) with the stable interim id.
func TestInterimThenFinalAnswer(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	srv := startAPI(t, w, agentapi.Config{})
	prog := script(t, `cat > /dev/null
curl -sf -H "Authorization: Bearer $MOLECULE_AGENT_TOKEN" -H 'Content-Type: application/json' \
  -d '{"text":"working on it"}' "$MOLECULE_AGENT_API/v1/interim" > /dev/null || exit 75
echo "final answer"`)
	h, err := handler.Parse("exec:"+prog, handler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	peer := askCanvasAndPeer(t, w, h, srv)
	pipelinetest.Eventually(t, 20*time.Second, "interims and answers posted", func() bool {
		return len(w.Plat.Notifications(w.Agent.ID)) >= 2 && len(w.Plat.A2ACalls(peer.ID)) >= 2
	})

	var got []string
	for _, n := range w.Plat.Notifications(w.Agent.ID) {
		got = append(got, n.Message)
	}
	if strings.Join(got, "|") != "working on it|final answer" {
		t.Errorf("canvas got %q, want the interim, then the answer", got)
	}
	msgs := messagesTo(t, w.Plat.A2ACalls(peer.ID))
	if len(msgs) != 2 || msgs[0].Parts[0].Text != "working on it" || msgs[1].Parts[0].Text != "final answer" {
		t.Fatalf("peer got %+v, want the interim, then the answer", msgs)
	}
	interim, final := msgs[0], msgs[1]
	activity, _ := final.Metadata["in_reply_to"].(string)
	if activity == "" || interim.Metadata["in_reply_to"] != activity || interim.Role != "agent" || interim.Metadata["relay_interim"] != true {
		t.Errorf("peer interim metadata %v role %q, want in_reply_to %q (the answer's), role agent, relay_interim", interim.Metadata, interim.Role, activity)
	}
	if interim.MessageID != agentapi.InterimID(activity, 1) {
		t.Errorf("peer interim messageId %s, want InterimID(activity, 1) = %s", interim.MessageID, agentapi.InterimID(activity, 1))
	}
	if _, ok := interim.Metadata["in_reply_to_message_id"]; ok {
		t.Errorf("peer interim carries in_reply_to_message_id: an asking relay would take it for the answer")
	}
}

// errOnce fails a handler run so that the message is redelivered.
var errOnce = errors.New("first run fails after its interim")

// TestInterimEffectivelyOnceOnRedelivery: a Go handler posts an interim,
// then fails; the redelivered run posts the same interim again and
// answers. The canvas user sees the interim once (the re-run finds its
// record); the peer gets both sends with one messageId, which a
// receiving Molecule Relay de-duplicates (docs/agentapi.md).
func TestInterimEffectivelyOnceOnRedelivery(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	srv := startAPI(t, w, agentapi.Config{})
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		if err := req.Interim(ctx, "step 1 done"); err != nil {
			return "", err
		}
		if req.Delivery == 1 {
			return "", errOnce
		}
		return "all done", nil
	})
	peer := askCanvasAndPeer(t, w, h, srv)
	pipelinetest.Eventually(t, 20*time.Second, "answers posted", func() bool {
		n := w.Plat.Notifications(w.Agent.ID)
		c := w.Plat.A2ACalls(peer.ID)
		return len(n) > 0 && n[len(n)-1].Message == "all done" && len(c) > 0 && strings.Contains(string(c[len(c)-1].Body), "all done")
	})
	var got []string
	for _, n := range w.Plat.Notifications(w.Agent.ID) {
		got = append(got, n.Message)
	}
	if strings.Join(got, "|") != "step 1 done|all done" {
		t.Errorf("canvas got %q, want the interim once, then the answer", got)
	}
	msgs := messagesTo(t, w.Plat.A2ACalls(peer.ID))
	if len(msgs) != 3 || msgs[0].MessageID != msgs[1].MessageID || msgs[0].Parts[0].Text != "step 1 done" {
		t.Errorf("peer got %+v, want the interim twice with one messageId, then the answer", msgs)
	}
}

// TestPeersDiscoverAndAsk: peers are listed (and cached), discover
// passes on the platform's answer, ask answers 501 while no Asker is configured.
func TestPeersDiscoverAndAsk(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	srv := startAPI(t, w, agentapi.Config{})
	agent, end := srv.Open(pipelinetest.Ctx(t), canvasMessage(w), time.Now().Add(time.Minute))
	defer end()
	url, tok := endpoint(t, agent)
	peersPath := "/registry/" + w.Agent.ID + "/peers"
	before := countRequests(w, peersPath)
	for range 2 {
		st, body := call(t, http.MethodGet, url+"/v1/peers", tok, "")
		if st != http.StatusOK || !strings.Contains(string(body), w.Peers[0].ID) {
			t.Fatalf("peers: %d %s", st, body)
		}
	}
	if n := countRequests(w, peersPath) - before; n != 1 {
		t.Errorf("two listings sent %d requests to the platform, want 1 (cached)", n)
	}
	// A poll-mode peer has no URL: the platform answers 503 "workspace
	// not available" (docs/protocol.md §9), passed on as a 502 that
	// says the platform refused.
	if st, body := call(t, http.MethodGet, url+"/v1/discover/"+w.Peers[0].ID, tok, ""); st != http.StatusBadGateway || !strings.Contains(string(body), "the platform answered 503") {
		t.Errorf("discover of a poll-mode peer: %d %s, want 502 passing on the platform's 503", st, body)
	}
	// A workspace the platform does not know is the handler's mistake,
	// not the platform's fault: 404, not 502.
	if st, body := call(t, http.MethodGet, url+"/v1/discover/7f000000-0000-4000-8000-000000000001", tok, ""); st != http.StatusNotFound {
		t.Errorf("discover of an unknown workspace: %d %s, want 404", st, body)
	}
	if st, body := call(t, http.MethodPost, url+"/v1/ask", tok, `{"peer_id":"`+w.Peers[0].ID+`","text":"hi"}`); st != http.StatusNotImplemented || !strings.Contains(string(body), "not available") {
		t.Errorf("ask without an Asker: %d %s, want 501", st, body)
	}
	if st, body := call(t, http.MethodPost, url+"/v1/interim", tok, `{"txt":"typo"}`); st != http.StatusBadRequest || !strings.Contains(string(body), "send JSON like") {
		t.Errorf("malformed interim: %d %s, want 400 saying what to send", st, body)
	}
	if st, body := call(t, http.MethodGet, url+"/v1/nope", tok, ""); st != http.StatusNotFound || !strings.Contains(string(body), "/v1/interim") {
		t.Errorf("unknown endpoint: %d %s, want 404 listing the endpoints", st, body)
	}
}

func countRequests(w *pipelinetest.World, path string) int {
	n := 0
	for _, r := range w.Plat.Requests() {
		if r.Path == path {
			n++
		}
	}
	return n
}

// askCanvasAndPeer runs the pipeline with h and the agent API srv until
// the test ends, and sends it one canvas message ("canvas asks") and one
// from the first peer ("peer asks"); it returns that peer.
func askCanvasAndPeer(t *testing.T, w *pipelinetest.World, h handler.Handler, srv *agentapi.Server) moleculetest.Workspace {
	t.Helper()
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Agent: srv}})
	t.Cleanup(func() { pl.Stop(t) })
	w.WaitSeeded(w.Agent.ID)
	peer := w.Peers[0]
	if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, "canvas asks"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Plat.SendPeer(pipelinetest.Ctx(t), peer, w.Agent.ID, "peer asks"); err != nil {
		t.Fatal(err)
	}
	return peer
}
