package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Claude Code's permission relay: a tool-approval prompt the client sends
// (permission_request) is posted to the canvas user, and the canvas user's
// "yes <id>" / "no <id>" comes back to the client as the permission verdict,
// not as a message; the canvas gets a confirmation. Any other text is an
// ordinary message.
func TestMCPPermissionPromptRelayedToCanvasAndVerdictBack(t *testing.T) {
	w := newMCPWorld(t)
	p := w.session()
	w.sendCanvas("warm-up") // the workspace is registered and polled
	m, _ := p.nextMessage(20 * time.Second)
	p.answer(m)

	for _, tc := range []struct{ id, reply, behavior, confirm string }{
		{"abcde", "yes abcde", "allow", "Allowed: Bash (abcde)."},
		{"fghij", "No FGHIJ", "deny", "Denied: Bash (fghij)."},
	} {
		p.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/claude/channel/permission_request", "params": map[string]string{
			"request_id": tc.id, "tool_name": "Bash", "description": "Run the tests", "input_preview": `{"command":"go test ./..."}`}})
		pipelinetest.Eventually(t, 20*time.Second, "the prompt on the canvas", func() bool {
			for _, n := range w.plat.Notifications(w.ws.ID) {
				if strings.Contains(n.Message, `"yes `+tc.id+`"`) && strings.Contains(n.Message, "Bash") {
					return true
				}
			}
			return false
		})
		w.sendCanvas(tc.reply)
		var v struct {
			RequestID string `json:"request_id"`
			Behavior  string `json:"behavior"`
		}
		if err := json.Unmarshal(p.nextNote("notifications/claude/channel/permission", 20*time.Second), &v); err != nil || v.RequestID != tc.id || v.Behavior != tc.behavior {
			t.Fatalf("verdict %+v (%v), want %s %s", v, err, tc.id, tc.behavior)
		}
		pipelinetest.Eventually(t, 20*time.Second, "the confirmation on the canvas", func() bool {
			for _, n := range w.plat.Notifications(w.ws.ID) {
				if n.Message == tc.confirm {
					return true
				}
			}
			return false
		})
	}
	// A reply to no open prompt is an ordinary message.
	w.sendCanvas("yes abcde")
	m, _ = p.nextMessage(20 * time.Second)
	p.answer(m)
}
