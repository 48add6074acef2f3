package filecache_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

func uploadsOf(w *pipelinetest.World) int {
	return w.Requests("POST", "/workspaces/"+w.Agent.ID+"/chat/uploads", 0)
}

// TestFileRoundTrip: a canvas user's upload (multipart, through the
// double's /chat/uploads) reaches an exec: program as a local path (and is
// acked), the program writes a file and answers with
// it attached by path (a structured answer), and the canvas gets a notify
// whose attachment is the platform's upload of that file, read back
// byte for byte.
func TestFileRoundTrip(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	in := bytes.Repeat([]byte("in\x00"), 1<<20) // 3 MiB
	// The canvas's multipart POST /chat/uploads (here with the workspace's
	// token), which stages the file for a poll-mode workspace.
	w.RegisterPoll(w.Agent)
	staged, err := w.Client(w.Agent).UploadChatFiles(pipelinetest.Ctx(t), []molecule.LocalFile{{Name: "input.bin", MimeType: "application/octet-stream", Content: in}})
	if err != nil {
		t.Fatal(err)
	}
	_, inID, _ := molecule.ParsePendingURI(staged[0].URI)
	up, _ := w.Plat.StagedUpload(inID)
	dir := t.TempDir()
	outFile := filepath.Join(dir, "answer.txt")
	prog := filepath.Join(dir, "agent.sh")
	script := "#!/bin/sh\np=$(jq -r '.files[0].path')\n(wc -c < \"$p\"; sha256sum < \"$p\") > '" + outFile + "'\n" +
		"printf '{\"text\":\"done\",\"attachments\":[{\"uri\":\"file://%s\",\"name\":\"answer.txt\",\"mime_type\":\"text/plain\"}]}' '" + outFile + "'\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := handler.Parse("exec:"+prog, handler.Options{AnswerJSON: true})
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}
	p := w.Proc()
	cfg := dispatcher.Config{
		Files:   &filecache.Cache{Dir: filepath.Join(dir, "cache"), Clients: clients},
		Uploads: &filecache.Uploader{Clients: clients, Records: p.Topo.Handled},
	}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: cfg})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	start := time.Now()
	sendWithFile(t, w, "count it", up.URI, up.Name)
	pipelinetest.Eventually(t, 20*time.Second, "answer posted", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	took := time.Since(start)
	n := w.Plat.Notifications(w.Agent.ID)[0]
	var atts []molecule.Attachment
	if err := json.Unmarshal(n.Attachments, &atts); err != nil || len(atts) != 1 || !strings.HasPrefix(atts[0].URI, molecule.PendingScheme) || n.Message != "done" {
		t.Fatalf("notify %q with attachments %s (%v); want one platform-pending upload", n.Message, n.Attachments, err)
	}
	if st, _ := w.Plat.StagedUpload(up.FileID); !st.Acked || st.Fetches != 1 {
		t.Fatalf("inbound upload: acked %v, fetches %d", st.Acked, st.Fetches)
	}
	_, fid, _ := molecule.ParsePendingURI(atts[0].URI)
	back, err := w.Client(w.Agent).FetchUpload(context.Background(), fid, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(back.Body)
	back.Body.Close()
	want, _ := os.ReadFile(outFile)
	if !bytes.Equal(got, want) || !strings.HasPrefix(string(got), "3145728\n") {
		t.Fatalf("answer file on the platform %q, want %q (the program saw 3145728 bytes)", got, want)
	}
	if u := uploadsOf(w); u != 2 {
		t.Fatalf("%d uploads, want 2 (the canvas's, the answer's)", u)
	}
	t.Logf("round trip: %d bytes in, %d bytes out, canvas send to notify with the file in %v", len(in), len(got), took)
}

// TestAnswerFileUploadedOnceUnderRetries: the same answer's file uploaded
// again (a retry after a crash past the upload) reuses the recorded URI;
// a changed file is a new upload; a missing or oversized file, or one
// holding the workspace token, is a permanent error naming it.
func TestAnswerFileUploadedOnceUnderRetries(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	w.RegisterPoll(w.Agent)
	u := &filecache.Uploader{Clients: map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}, Records: w.Proc().Topo.Handled, MaxBytes: 1 << 20}
	dir := t.TempDir()
	f := filepath.Join(dir, "chart.png")
	if err := os.WriteFile(f, []byte("png v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := pipelinetest.Ctx(t)
	atts := []events.Attachment{{URI: f, MimeType: "image/png"}, {URI: "https://example.com/a.pdf", Name: "a.pdf"}}
	first, err := u.Upload(ctx, w.Agent.ID, "act-1", atts)
	if err != nil || len(first) != 2 || first[0].Name != "chart.png" || !strings.HasPrefix(first[0].URI, molecule.PendingScheme) || first[1] != atts[1] {
		t.Fatalf("first upload: %+v, %v", first, err)
	}
	again, err := u.Upload(ctx, w.Agent.ID, "act-1", atts)
	if err != nil || again[0] != first[0] || uploadsOf(w) != 1 {
		t.Fatalf("retry: %+v, %v, %d uploads; want the recorded URI, 1 upload", again, err, uploadsOf(w))
	}
	if err := os.WriteFile(f, []byte("png v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := u.Upload(ctx, w.Agent.ID, "act-1", atts); err != nil || changed[0].URI == first[0].URI || uploadsOf(w) != 2 {
		t.Fatalf("changed file: %+v, %v", changed, err)
	}
	big := filepath.Join(dir, "big.bin")
	_ = os.WriteFile(big, make([]byte, 1<<20+1), 0o600)
	env := filepath.Join(dir, ".env")
	_ = os.WriteFile(env, []byte("MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token+"\n"), 0o600)
	u.Secrets = []string{w.Agent.Token}
	for _, p := range []string{filepath.Join(dir, "missing.txt"), big, env} {
		if _, err := u.Upload(ctx, w.Agent.ID, "act-2", []events.Attachment{{URI: p}}); !errors.Is(err, handler.ErrPermanent) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want a permanent error naming it", p, err)
		}
	}
}
