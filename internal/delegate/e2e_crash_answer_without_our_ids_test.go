package delegate_test

import (
	"net/http"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// As TestE2EDelegatedAnswerReachesHandlerRerunAfterAskerKilled, with a peer
// that answers without our ids (the TypeScript channel's stand-in): the
// answer, posted while no asking process lives, is matched through the
// awaiting list the dead process left, and the re-run gets it; the
// question is not asked again, the canvas gets one final answer.
func TestE2EAnswerWithoutOurIDsReachesHandlerRerunAfterAskerKilled(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	asked := make(chan struct{})
	release := make(chan struct{})
	answer := tsChannelAnswer(func(q string) string { return "B: " + q })
	startStandIn(t, w, peer, func(p moleculetest.Workspace, q question) (http.Header, []byte) {
		close(asked) // B is asked once: a second question panics the test
		<-release
		return answer(p, q)
	})
	rerunAfterAskerKilled(t, w, peer, asked, release)
}
