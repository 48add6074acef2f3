package pipelinetest

import (
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// StartPeerRelay runs a second Molecule Relay for peer i on its own NATS
// server: poller (with SSE wake-ups, as connect runs it), dispatcher with
// h, and replier, all stopped at test cleanup. It returns once the peer's
// cursor is seeded, so messages sent to the peer from then on are handled.
func (w *World) StartPeerRelay(i int, h handler.Handler) *Proc {
	w.T.Helper()
	peer := w.Peers[i]
	p := w.procAt(natstest.Start(w.T).ClientURL())
	c := w.Client(peer)
	Start(w.T, w.NewDispatcher(p, h, dispatcher.Config{}).Run)
	Start(w.T, w.NewReplier(p, map[string]*molecule.Client{peer.ID: c}, replier.Config{}).Run)
	Start(w.T, w.NewPoller(p, poller.Config{Workspaces: []*molecule.Client{c}, SSE: true}).Run)
	Eventually(w.T, 15*time.Second, "the peer relay's cursor seeded", func() bool {
		_, err := p.Topo.Cursors.Get(Ctx(w.T), peer.ID)
		return err == nil
	})
	return p
}
