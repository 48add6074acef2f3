package mcpchannel_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// When the session's only workspace is deleted on the platform, the poller
// stops polling it, and the session stays: its tools still answer (and say
// the workspace was deleted) instead of Claude Code losing the server with
// a bare "transport closed", and the client's leaving ends it cleanly.
func TestSessionOutlivesItsOnlyWorkspacesDeletion(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	var logs pipelinetest.LogBuffer
	r, err := newRelayLogged(t, w, mcpchannel.LeaseConfig{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("mcpchannel.Start: %v", err)
	}
	w.WaitSeeded(w.Agent.ID)
	cl := connect(t, r)
	w.Plat.Delete(w.Agent.ID)
	// The poller and the replier have ended once this is logged.
	pipelinetest.Eventually(t, 15*time.Second, "the mcp relay to see polling stopped", func() bool {
		return strings.Contains(logs.String(), "mcp: polling stopped on every workspace")
	})
	if txt, isErr := cl.call(mcpchannel.ToolInfo, nil); !isErr || !strings.Contains(txt, "was deleted on the platform") {
		t.Fatalf("get_workspace_info after polling stopped: %s (error %v)", txt, isErr)
	}
	cl.disconnect() // fails the test if Serve returned an error
}
