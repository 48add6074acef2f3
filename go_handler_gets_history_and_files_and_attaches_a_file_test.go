package relay_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// A Go handler gets the conversation's earlier turns (memory), the
// message's attachment as a local file and through Context.OpenFile, and
// answers a canvas user with a local file, which the relay uploads, even
// where MOLECULE_HANDLER names an http: handler (whose paths the relay
// never uploads: the Go handler replaces it).
func TestGoHandlerGetsHistoryAndFilesAndAttachesAFile(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	report := filepath.Join(t.TempDir(), "report.txt")
	if err := os.WriteFile(report, []byte("all good"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]*relay.Message{}
	var opened string
	r := open(t, func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
		mu.Lock()
		defer mu.Unlock()
		seen[m.Text] = m
		if len(m.Attachments) == 0 {
			return relay.Answer{Text: "noted"}, nil
		}
		body, _, err := c.OpenFile(m.Attachments[0].URI)
		if err != nil {
			return relay.Answer{}, err
		}
		defer body.Close()
		b, _ := io.ReadAll(body)
		opened = string(b)
		return relay.Answer{Text: "see the report", Attachments: []relay.Attachment{{URI: report, Name: "report.txt", MimeType: "text/plain"}}}, nil
	}, settings(w, relay.Setting("MOLECULE_FILES_DIR", t.TempDir()), relay.Setting("MOLECULE_HANDLER", "http://127.0.0.1:1/reply"))...)

	// One-shot runs: each answers everything and records its turns
	// before the next message is sent.
	once := func(what string) {
		t.Helper()
		if rep, err := r.Once(pipelinetest.Ctx(t), 200*time.Millisecond); err != nil {
			t.Fatalf("%s: %v %+v", what, err, rep)
		}
	}
	once("registration")
	w.SendCanvas("my name is Ada")
	once("first message")
	up := w.Plat.StageUpload(w.Agent.ID, "notes.txt", "text/plain", []byte("notes of Ada"))
	sendWithFile(t, w, "read my notes", up.URI, up.Name)
	once("second message")

	mu.Lock()
	defer mu.Unlock()
	m := seen["read my notes"]
	if m == nil {
		t.Fatalf("the handler never saw the second message (saw %v)", seen)
	}
	if len(m.History) != 2 || m.History[0].Agent || m.History[0].Text != "my name is Ada" || !m.History[1].Agent || m.History[1].Text != "noted" {
		t.Errorf("history %+v, want the first message and its answer", m.History)
	}
	if len(m.Files) != 1 || m.Files[0].Error != "" {
		t.Fatalf("files %+v, want the attachment held", m.Files)
	}
	if b, err := os.ReadFile(m.Files[0].Path); err != nil || string(b) != "notes of Ada" {
		t.Errorf("file at %q: %q %v", m.Files[0].Path, b, err)
	}
	if opened != "notes of Ada" {
		t.Errorf("OpenFile read %q", opened)
	}
	n := w.Plat.Notifications(w.Agent.ID)
	if len(n) != 2 || n[1].Message != "see the report" {
		t.Fatalf("canvas got %+v", n)
	}
	var atts []struct{ URI, Name string }
	if err := json.Unmarshal(n[1].Attachments, &atts); err != nil || len(atts) != 1 || atts[0].Name != "report.txt" || strings.HasPrefix(atts[0].URI, "/") {
		t.Errorf("answer's attachments %s (%v), want report.txt uploaded", n[1].Attachments, err)
	}
}

// sendWithFile sends a canvas message with text and a file part.
func sendWithFile(t *testing.T, w *pipelinetest.World, text, uri, name string) {
	t.Helper()
	parts := []any{map[string]any{"kind": "text", "text": text}, map[string]any{"kind": "file", "file": map[string]any{"uri": uri, "name": name}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "1", "method": "message/send",
		"params": map[string]any{"message": map[string]any{"role": "user", "messageId": text + "-id", "parts": parts}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, b, err := w.Plat.SendRaw(ctx, w.Agent.ID, w.Plat.CanvasHeader(), body); err != nil || st >= 300 {
		t.Fatalf("send: %d %s %v", st, b, err)
	}
}
