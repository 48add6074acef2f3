package agentapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// handlerKey marks the handler's context, as the dispatcher's values do.
type handlerKey struct{}

// scribe is an Asker that answers every question with its own text and
// remembers what it was given; the real Asker (internal/delegate, issue 13
// part C) plugs in the same way.
type scribe struct {
	mu     sync.Mutex
	scopes []agentapi.Scope
	values []any
}

func (a *scribe) Ask(ctx context.Context, s agentapi.Scope, q handler.Question) (*handler.PeerAnswer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.scopes = append(a.scopes, s)
	a.values = append(a.values, ctx.Value(handlerKey{}))
	return &handler.PeerAnswer{Text: "re: " + q.Text, MessageID: "m-1"}, nil
}

// TestAskReachesTheAskerWithTheHandlersContext: POST /v1/ask hands the
// question to the Asker with the message, the handler's deadline, the
// question's number within the run, and the handler context's values
// (what lets a waiting ask give its dispatcher slot back), and answers
// the Asker's answer.
func TestAskReachesTheAskerWithTheHandlersContext(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	asker := &scribe{}
	srv := startAPI(t, w, agentapi.Config{Asker: asker})
	in := canvasMessage(w)
	deadline := time.Now().Add(time.Minute)
	hctx := context.WithValue(pipelinetest.Ctx(t), handlerKey{}, "the handler's")
	agent, end := srv.Open(hctx, in, deadline)
	defer end()
	url, tok := endpoint(t, agent)
	for _, text := range []string{"first", "second"} {
		st, body := call(t, http.MethodPost, url+"/v1/ask", tok, `{"peer_id":"`+w.Agent.ID+`","text":"`+text+`","timeout_seconds":5}`)
		var ans handler.PeerAnswer
		if st != http.StatusOK || json.Unmarshal(body, &ans) != nil || ans.Text != "re: "+text {
			t.Fatalf("ask %s: %d %s", text, st, body)
		}
	}
	asker.mu.Lock()
	defer asker.mu.Unlock()
	for i, s := range asker.scopes {
		if s.N != i+1 || s.Message.ActivityID != in.ActivityID || !s.Deadline.Equal(deadline) || asker.values[i] != "the handler's" {
			t.Errorf("question %d: scope %+v, context value %v", i+1, s, asker.values[i])
		}
	}
	if len(asker.scopes) != 2 {
		t.Fatalf("the Asker got %d questions, want 2", len(asker.scopes))
	}
}
