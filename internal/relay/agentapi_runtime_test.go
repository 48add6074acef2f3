package relay_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// TestRuntimeServesAgentAPIAndStructuredAnswers: a Runtime assembled from
// configuration (MOLECULE_HANDLER_ANSWER=json, the agent API on its
// default loopback address) runs an exec: program that posts an interim
// message with curl and answers JSON with an attachment: the canvas gets
// the interim, then the answer with its attachment.
func TestRuntimeServesAgentAPIAndStructuredAnswers(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	prog := filepath.Join(t.TempDir(), "agent.sh")
	body := `#!/bin/sh
cat > /dev/null
curl -sf -H "Authorization: Bearer $MOLECULE_AGENT_TOKEN" -d '{"text":"on it"}' "$MOLECULE_AGENT_API/v1/interim" > /dev/null || exit 75
echo '{"text":"done","attachments":[{"uri":"https://files.example/a.txt","name":"a.txt","mime_type":"text/plain","size":3}]}'
`
	if err := os.WriteFile(prog, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID="+w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"MOLECULE_HANDLER=exec:"+prog,
		"MOLECULE_HANDLER_ANSWER=json",
		"NATS_URL="+w.NATSURL(),
	)
	if rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond); err != nil || !rep.OK() {
		t.Fatalf("first Once (register, seed): %v %+v", err, rep)
	}
	if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, "go"); err != nil {
		t.Fatal(err)
	}
	if rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond); err != nil || !rep.OK() || rep.Replied != 1 {
		t.Fatalf("second Once: %v %+v", err, rep)
	}
	n := w.Plat.Notifications(w.Agent.ID)
	if len(n) != 2 || n[0].Message != "on it" || n[1].Message != "done" || !strings.Contains(string(n[1].Attachments), `"mimeType":"text/plain"`) {
		t.Fatalf("canvas got %+v, want the interim, then the answer with its attachment", n)
	}
}
