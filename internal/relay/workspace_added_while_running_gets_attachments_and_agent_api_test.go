package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// TestWorkspaceAddedWhileRunningGetsAttachmentsAndAgentAPI: a workspace
// added to the registry after the relay started has its message's
// attachment fetched by the dispatcher's file cache and its agent-API
// call (an interim message) answered, as a workspace configured at start
// has: both look the workspace's client up in the registry.
func TestWorkspaceAddedWhileRunningGetsAttachmentsAndAgentAPI(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	rt := w.open(t, "MOLECULE_FILES_DIR="+t.TempDir())
	rt.SetHandler(handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		interim := req.Interim(ctx, "on it")
		if len(req.Files) != 1 {
			return fmt.Sprintf("files %d, interim %v", len(req.Files), interim), nil
		}
		b, err := os.ReadFile(req.Files[0].Path)
		return fmt.Sprintf("file %q (%s %v), interim %v", b, req.Files[0].Error, err, interim), nil
	}))
	w.run(t, rt)

	ws := w.plat.CreateWorkspace("added later")
	w.put(t, ws.ID, ws.Token)
	up := w.plat.StageUpload(ws.ID, "note.txt", "text/plain", []byte("attached words"))
	parts := []any{map[string]any{"kind": "text", "text": "read this"}, map[string]any{"kind": "file", "file": map[string]any{"uri": up.URI, "name": up.Name}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "1", "method": "message/send",
		"params": map[string]any{"message": map[string]any{"role": "user", "messageId": "m-1", "parts": parts}}})
	if st, b, err := w.plat.SendRaw(w.sendTo, ws.ID, w.plat.CanvasHeader(), body); err != nil || st >= 300 {
		t.Fatalf("send: %d %s %v", st, b, err)
	}
	pipelinetest.Eventually(t, 20*time.Second, "the interim and the answer", func() bool { return len(w.plat.Notifications(ws.ID)) >= 2 })
	n := w.plat.Notifications(ws.ID)
	if want := `file "attached words" ( <nil>), interim <nil>`; len(n) != 2 || n[0].Message != "on it" || n[1].Message != want {
		t.Fatalf("canvas got %+v; want the interim, then %q", n, want)
	}
	if st, _ := w.plat.StagedUpload(up.FileID); st.Fetches != 1 {
		t.Errorf("the upload was fetched %d times, want once", st.Fetches)
	}
}
