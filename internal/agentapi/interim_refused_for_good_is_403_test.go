package agentapi_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// An interim the 2026-08 platform refuses for good — a workspace whose
// "talk to user" is off answers /notify with 403 talk_to_user_disabled
// (enteros-core aeec8e47 handlers/activity.go:872-877) — is answered at
// once by the agent API with 403 and the cause, not 502 as if the platform
// were failing, and a Go handler can match the sentinel.
func TestInterimRefusedForGoodIs403WithTheCause(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	srv := startAPI(t, w, agentapi.Config{})
	w.Plat.SetTalkToUser(w.Agent.ID, false)
	agent, end := srv.Open(pipelinetest.Ctx(t), canvasMessage(w), time.Now().Add(time.Minute))
	defer end()
	url, tok := endpoint(t, agent)
	st, body := call(t, http.MethodPost, url+"/v1/interim", tok, `{"text":"working on it"}`)
	if st != http.StatusForbidden || !strings.Contains(string(body), "talking to the user is disabled") || !strings.Contains(string(body), "for good") {
		t.Fatalf("interim: %d %s", st, body)
	}
	if err := agent.Interim(pipelinetest.Ctx(t), handler.Interim{Text: "again"}); !errors.Is(err, molecule.ErrTalkToUserDisabled) {
		t.Errorf("Go interim: %v, want ErrTalkToUserDisabled", err)
	}
}
