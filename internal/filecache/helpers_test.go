package filecache_test

import (
	"encoding/json"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// sendWithFile posts a canvas message to the agent whose file part names
// uri, as the canvas does after an upload.
func sendWithFile(t *testing.T, w *pipelinetest.World, text, uri, name string) {
	t.Helper()
	parts := []any{map[string]any{"kind": "text", "text": text}, map[string]any{"kind": "file", "file": map[string]any{"uri": uri, "name": name}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "1", "method": "message/send",
		"params": map[string]any{"message": map[string]any{"role": "user", "messageId": text + "-id", "parts": parts}}})
	if st, b, err := w.Plat.SendRaw(pipelinetest.Ctx(t), w.Agent.ID, w.Plat.CanvasHeader(), body); err != nil || st >= 300 {
		t.Fatalf("send: %d %s %v", st, b, err)
	}
}
