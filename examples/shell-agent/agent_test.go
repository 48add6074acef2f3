package shellagent_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

func agentScript(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"sh", "jq", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the shell agent needs %s (.ci/run installs jq and curl): %v", tool, err)
		}
	}
	p, err := filepath.Abs("agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestShellAgentInterimPeersAndAnswer runs the example as the
// dispatcher's exec: handler with structured answers, against the
// platform double with the real stages: the canvas user gets its interim
// message, then its answer naming the message and the agent's peer.
func TestShellAgentInterimPeersAndAnswer(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	api, err := agentapi.New(agentapi.Config{
		Clients: map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)},
		Records: w.Obs.Topo.Handled,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	h, err := handler.Parse("exec:"+agentScript(t), handler.Options{AnswerJSON: true})
	if err != nil {
		t.Fatal(err)
	}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Agent: api}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, "hello"); err != nil {
		t.Fatal(err)
	}
	pipelinetest.Eventually(t, 20*time.Second, "interim and answer", func() bool {
		return len(w.Plat.Notifications(w.Agent.ID)) >= 2
	})
	n := w.Plat.Notifications(w.Agent.ID)
	if len(n) != 2 || n[0].Message != "working on it…" {
		t.Fatalf("canvas got %+v, want the interim, then the answer", n)
	}
	want := "You said: hello. I remember 0 earlier turn(s). I see 1 peer(s): " + w.Peers[0].Name + "."
	if n[1].Message != want {
		t.Errorf("answer %q, want %q", n[1].Message, want)
	}
}

// TestShellAgentReadsHistory feeds the program a payload with the
// conversation's earlier turns (the payload's "history") and no agent
// API: it answers from memory alone.
func TestShellAgentReadsHistory(t *testing.T) {
	payload, _ := json.Marshal(map[string]any{
		"message": map[string]any{"text": "and now?"},
		"history": []map[string]any{
			{"role": "user", "text": "my name is Ada"},
			{"role": "agent", "text": "hello Ada"},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentScript(t))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(string(payload))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	a, err := handler.ParseAnswer(out)
	if err != nil {
		t.Fatalf("not a structured answer: %v\n%s", err, out)
	}
	want := "You said: and now?. I remember 2 earlier turn(s); before this you said: my name is Ada. I see no agent API."
	if a.Text != want || a.NoReply {
		t.Errorf("answer %+v, want %q", a, want)
	}
}
