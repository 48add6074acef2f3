package relay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// TestRuntimeExecHandlerAsksPeerAndWaits: relay A, assembled from
// configuration with one dispatcher slot, runs an exec: program that asks
// peer B through the agent API (POST /v1/ask, curl) and answers with B's
// answer; B is a second relay on its own NATS. The question is answered
// through the platform while the program waits (its slot given back), and
// the canvas gets one answer quoting B.
func TestRuntimeExecHandlerAsksPeerAndWaits(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	w.StartPeerRelay(0, handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
		return "B: " + req.Message.Text, nil
	}))
	prog := filepath.Join(t.TempDir(), "agent.sh")
	body := `#!/bin/sh
cat > /dev/null
ans=$(curl -sf -H "Authorization: Bearer $MOLECULE_AGENT_TOKEN" \
  -d '{"peer_id":"` + peer.ID + `","text":"what is 6 x 7?","timeout_seconds":20}' "$MOLECULE_AGENT_API/v1/ask") || exit 75
echo "peer says: $(printf '%s' "$ans" | sed -n 's/.*"text":"\([^"]*\)".*/\1/p')"
`
	if err := os.WriteFile(prog, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID="+w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"MOLECULE_HANDLER=exec:"+prog,
		"MOLECULE_CONCURRENCY=1",
		"MOLECULE_POLL_INTERVAL=200ms",
		"NATS_URL="+w.NATSURL(),
	)
	pipelinetest.Start(t, func(ctx context.Context) error { return rt.Run(ctx, relay.All) })
	w.WaitSeeded(w.Agent.ID)
	w.SendCanvas("ask B")
	pipelinetest.Eventually(t, 30*time.Second, "the canvas answer", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	if n := w.Plat.Notifications(w.Agent.ID); len(n) != 1 || n[0].Message != "peer says: B: what is 6 x 7?" {
		t.Fatalf("canvas got %+v, want one answer quoting B", n)
	}
}
