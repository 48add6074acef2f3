package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// codexVersion is the Codex CLI the test runs (npm @openai/codex).
const codexVersion = "0.171.0"

// codexCLI finds Codex's CLI: MOLECULE_CODEX_BIN, else one npm installed
// into the test cache (npmDir; MOLECULE_CODEX_DIR names another).
func codexCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MOLECULE_CODEX_BIN"); p != "" {
		return p
	}
	return filepath.Join(npmDir(t, "MOLECULE_CODEX_DIR", "@openai/codex", codexVersion), "node_modules", ".bin", "codex")
}

// codexModel stands in for the OpenAI Responses API (POST /v1/responses,
// streamed as server-sent events), scripted as an agent following the
// pull loop: call the molecule server's wait_for_message, answer what it
// returns with reply_to_workspace, then end the turn. Codex itself runs
// the MCP client: it starts molecule-relay mcp, lists its tools (as the
// namespace mcp__molecule) and makes the calls the model asks for.
type codexModel struct {
	t       *testing.T
	mu      sync.Mutex
	pulled  map[string]any // what wait_for_message returned
	replied string         // what reply_to_workspace returned
}

func (m *codexModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input []struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/responses" {
		http.Error(w, fmt.Sprintf("stand-in model: %s %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	var outputs []string
	for _, in := range req.Input {
		if in.Type == "function_call_output" {
			outputs = append(outputs, toolOutput(in.Output))
		}
	}
	m.mu.Lock()
	var item map[string]any
	switch len(outputs) {
	case 0:
		item = codexCall("wait_for_message", map[string]any{"timeout_secs": 30})
	case 1:
		m.pulled = map[string]any{}
		if err := json.Unmarshal([]byte(outputs[0]), &m.pulled); err != nil || m.pulled["activity_id"] == nil {
			m.t.Errorf("wait_for_message's output to Codex: %q (%v)", outputs[0], err)
		}
		item = codexCall("reply_to_workspace", map[string]any{"activity_id": m.pulled["activity_id"], "peer_id": m.pulled["peer_id"],
			"workspace_id": m.pulled["workspace_id"], "text": fmt.Sprintf("codex answer to %v", m.pulled["text"])})
	default:
		m.replied = outputs[1]
		item = map[string]any{"type": "message", "role": "assistant", "id": "m1", "content": []any{map[string]any{"type": "output_text", "text": "done"}}}
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	id := fmt.Sprintf("resp_%d", len(outputs))
	for _, ev := range []map[string]any{
		{"type": "response.created", "response": map[string]any{"id": id}},
		{"type": "response.output_item.done", "item": item},
		{"type": "response.completed", "response": map[string]any{"id": id, "usage": map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}},
	} {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
	}
}

// codexCall is a function call of the molecule server's tool name.
func codexCall(name string, args map[string]any) map[string]any {
	b, _ := json.Marshal(args)
	return map[string]any{"type": "function_call", "namespace": "mcp__molecule", "name": name, "arguments": string(b), "call_id": "call_" + name}
}

// toolOutput is the tool's text in a function call's output: Codex sends
// text parts, a "Wall time: …" line first.
func toolOutput(raw json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var texts []string
	for _, p := range parts {
		if !strings.HasPrefix(p.Text, "Wall time:") {
			texts = append(texts, p.Text)
		}
	}
	return strings.TrimSpace(strings.Join(texts, ""))
}

// Codex's CLI, which needs no login to run its MCP client (here against a
// stand-in of the Responses API), receives a canvas message through
// wait_for_message and answers it with reply_to_workspace, once.
func TestCodexCLIPullsAMessageAndAnswersItOnce(t *testing.T) {
	codex := codexCLI(t)
	w := newMCPWorld(t)
	model := &codexModel{t: t}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)

	home := t.TempDir()
	var env strings.Builder
	for _, kv := range w.environ {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&env, "%s = %s\n", k, strconv.Quote(v))
	}
	config := fmt.Sprintf(`model = "stand-in"
model_provider = "standin"

[model_providers.standin]
name = "stand-in"
base_url = %q
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.molecule]
command = %q
args = ["mcp"]
tool_timeout_sec = 120

[mcp_servers.molecule.env]
%s`, srv.URL+"/v1", relayBin(t), env.String())
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
		"Answer the Molecule messages: call wait_for_message, then reply_to_workspace.")
	cmd.Env = []string{"CODEX_HOME=" + home, "HOME=" + home, "PATH=" + os.Getenv("PATH")}
	cmd.Dir = home
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Sent once Codex's molecule-relay mcp registered the workspace in
	// poll mode, while the stand-in model has Codex wait for it.
	w.sendCanvas("hello codex")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("codex exec: %v\n%s", err, out.String())
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if model.pulled["text"] != "hello codex" || model.pulled["kind"] != "canvas_user" {
		t.Fatalf("Codex got %v from wait_for_message\n%s", model.pulled, out.String())
	}
	if !strings.Contains(model.replied, "Replied to the canvas user") {
		t.Fatalf("reply_to_workspace told Codex %q\n%s", model.replied, out.String())
	}
	if got := w.plat.Notifications(w.ws.ID); len(got) != 1 || got[0].Message != "codex answer to hello codex" {
		t.Fatalf("notifies = %+v", got)
	}
}
