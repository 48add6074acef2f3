package mcpchannel_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// sendWithFiles posts a canvas message whose file parts name uris.
func sendWithFiles(t *testing.T, w *pipelinetest.World, text string, files ...[2]string) {
	t.Helper()
	parts := []any{map[string]any{"kind": "text", "text": text}}
	for _, f := range files {
		parts = append(parts, map[string]any{"kind": "file", "file": map[string]any{"uri": f[0], "name": f[1]}})
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "1", "method": "message/send",
		"params": map[string]any{"message": map[string]any{"role": "user", "messageId": text + "-id", "parts": parts}}})
	if st, b, err := w.Plat.SendRaw(pipelinetest.Ctx(t), w.Agent.ID, w.Plat.CanvasHeader(), body); err != nil || st >= 300 {
		t.Fatalf("send: %d %s %v", st, b, err)
	}
}

// TestAttachmentMetaKeysAreTheTypeScriptChannels pins the meta keys of
// enteros-mcp-claude-channel 4255a28 server.ts 633-650
// (flattenAttachmentMeta): attachment_count, attachment_kind/_path/_name/
// _mime for the first, attachment_2_… for the second, image_path for a
// first image held locally; the relay adds _error for one it does not hold.
func TestAttachmentMetaKeysAreTheTypeScriptChannels(t *testing.T) {
	in := &events.Inbound{WorkspaceID: "11111111-1111-4111-8111-111111111111", ActivityID: "a", Source: events.SourceCanvasUser, Text: "see",
		Attachments: []events.Attachment{{URI: "platform-pending:x/y", Name: "shot.png"}, {URI: "workspace:/workspace/r.pdf", Name: "r.pdf", MimeType: "application/pdf"}}}
	files := []handler.File{
		{URI: "platform-pending:x/y", Name: "shot.png", MimeType: "image/png", Path: "/cache/ws/y/shot.png"},
		{URI: "workspace:/workspace/r.pdf", Name: "r.pdf", MimeType: "application/pdf", Error: "not fetched: 422"},
	}
	n := mcpchannel.NewNotificationWithFiles(in, files)
	want := map[string]string{
		"attachment_count": "2", "attachment_kind": "image", "attachment_path": "/cache/ws/y/shot.png", "attachment_name": "shot.png",
		"attachment_mime": "image/png", "image_path": "/cache/ws/y/shot.png",
		"attachment_2_kind": "file", "attachment_2_path": "workspace:/workspace/r.pdf", "attachment_2_name": "r.pdf",
		"attachment_2_mime": "application/pdf", "attachment_2_error": "not fetched: 422",
	}
	for k, v := range want {
		if n.Meta[k] != v {
			t.Errorf("meta[%s] = %q, want %q", k, n.Meta[k], v)
		}
	}
	if !strings.Contains(n.Content, "/cache/ws/y/shot.png") || !strings.Contains(n.Content, "not fetched: 422") {
		t.Errorf("content lacks the path or the reason:\n%s", n.Content)
	}
}

// TestCanvasUploadReachesClaudeAsLocalPath: through the whole channel, a
// canvas user's upload is on disk before Claude is told, its path in
// attachment_path (whole, not cut), acked on the platform; an upload it
// was not sent is fetched with download_attachment.
func TestCanvasUploadReachesClaudeAsLocalPath(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := startRelay(t, w)
	cl := connect(t, r)
	content := bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 50_000)
	up := w.Plat.StageUpload(w.Agent.ID, "screenshot.png", "image/png", content)
	sendWithFiles(t, w, "what is on this screen", [2]string{up.URI, up.Name})
	n := cl.next(20 * time.Second)
	p := n.Meta["attachment_path"]
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("attachment_path %q: %v (meta %v)", p, err, n.Meta)
	}
	if n.Meta["image_path"] != p || n.Meta["attachment_kind"] != "image" || n.Meta["attachment_count"] != "1" || !strings.Contains(n.Content, p) {
		t.Fatalf("meta %v\n%s", n.Meta, n.Content)
	}
	if st, _ := w.Plat.StagedUpload(up.FileID); !st.Acked {
		t.Fatal("the upload was not acked")
	}
	// A pull client sees the same keys (wait_for_message).
	if text, isErr := cl.call(mcpchannel.ToolWaitForMessage, map[string]any{"timeout_secs": 5}); isErr || !strings.Contains(text, `"attachment_path": "`+p+`"`) {
		t.Fatalf("wait_for_message: %s (error %v), want attachment_path %s", text, isErr, p)
	}
	other := w.Plat.StageUpload(w.Agent.ID, "notes.txt", "text/plain", []byte("later"))
	text, isErr := cl.call(mcpchannel.ToolDownloadAttachment, map[string]any{"uri": other.URI})
	var f handler.File
	if isErr || json.Unmarshal([]byte(text), &f) != nil || f.Path == "" {
		t.Fatalf("download_attachment: %q (error %v)", text, isErr)
	}
	if b, _ := os.ReadFile(f.Path); string(b) != "later" {
		t.Fatalf("downloaded %q", b)
	}
	foreign := w.Plat.StageUpload(w.Plat.CreateWorkspace("other").ID, "x.txt", "text/plain", []byte("theirs"))
	if text, isErr := cl.call(mcpchannel.ToolDownloadAttachment, map[string]any{"uri": foreign.URI}); !isErr {
		t.Fatalf("another workspace's upload: %q, want refused", text)
	}
	if _, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "a screen"}); isErr {
		t.Fatal("reply failed")
	}
}

// TestSendMessageToUserUploadsLocalFileOnce: send_message_to_user with a
// local path uploads it through /chat/uploads and posts the notify with the
// platform's URI; the same call again (same idempotency key) neither
// uploads nor posts again.
func TestSendMessageToUserUploadsLocalFileOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	f := t.TempDir() + "/report.csv"
	if err := os.WriteFile(f, []byte("a,b\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if txt, isErr := cl.call(mcpchannel.ToolSendToUser, map[string]any{"message": "the report", "attachments": []string{f}, "idempotency_key": "r1"}); isErr {
			t.Fatalf("send: %s", txt)
		}
	}
	pipelinetest.Eventually(t, 20*time.Second, "the post", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	n := w.Plat.Notifications(w.Agent.ID)
	if len(n) != 1 || !strings.Contains(string(n[0].Attachments), "platform-pending:") || !strings.Contains(string(n[0].Attachments), "report.csv") {
		t.Fatalf("notifies %+v; want one with the uploaded file", n)
	}
	if u := w.Requests("POST", "/chat/uploads", 0); u != 1 {
		t.Fatalf("%d uploads, want 1", u)
	}
}
