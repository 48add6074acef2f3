package agentapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestInterimCountedInTheRateBudget: with a platform limit of 6 requests
// a minute and the reserve of 3 kept for the heartbeat, a peer listing and
// two interims spend the budget down to the reserve; the third interim
// would have to wait past the handler's deadline for the window to reset,
// so it is refused with 429 and Retry-After, and nothing is posted.
func TestInterimCountedInTheRateBudget(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithRateLimit(6, time.Minute)}})
	srv := startAPI(t, w, agentapi.Config{})
	agent, end := srv.Open(pipelinetest.Ctx(t), canvasMessage(w), time.Now().Add(10*time.Second))
	defer end()
	url, tok := endpoint(t, agent)
	if st, body := call(t, http.MethodGet, url+"/v1/peers", tok, ""); st != http.StatusOK {
		t.Fatalf("peers: %d %s", st, body)
	}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		st, body := call(t, http.MethodPost, url+"/v1/interim", tok, `{"text":"step"}`)
		if st != want {
			t.Fatalf("interim %d: %d %s, want %d", i+1, st, body, want)
		}
		if st == http.StatusTooManyRequests && !strings.Contains(string(body), "rate budget") {
			t.Errorf("429 body %s does not say why", body)
		}
	}
	if n := len(w.Plat.Notifications(w.Agent.ID)); n != 2 {
		t.Errorf("%d interims posted, want 2", n)
	}
}
