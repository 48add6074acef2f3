package filecache_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// TestExecHandlerReadsAttachmentPath runs the real pipeline: a canvas
// user's upload (staged, then named by a message's file part) reaches an
// exec: program as files[0] of its stdin JSON with a local path, the
// SHA-256 and MIME type; the program reads the path; the platform sees the
// upload fetched once and acked; the answer is posted.
func TestExecHandlerReadsAttachmentPath(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	content := bytes.Repeat([]byte("page\x00\xff"), 200_000) // 1.2 MB
	up := w.Plat.StageUpload(w.Agent.ID, "report.pdf", "application/pdf", content)
	dir := t.TempDir()
	out := filepath.Join(dir, "payload.json")
	prog := filepath.Join(dir, "agent.sh")
	script := "#!/bin/sh\ntee '" + out + "' | jq -r '.files[0].path' | xargs sha256sum | cut -d' ' -f1\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := handler.Parse("exec:"+prog, handler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cache := &filecache.Cache{Dir: filepath.Join(dir, "cache"), Clients: map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Files: cache}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	start := time.Now()
	sendWithFile(t, w, "read this", up.URI, up.Name)
	pipelinetest.Eventually(t, 20*time.Second, "answer posted", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	took := time.Since(start)
	sum := sha256.Sum256(content)
	if got := w.Plat.Notifications(w.Agent.ID)[0].Message; got != hex.EncodeToString(sum[:]) {
		t.Fatalf("answer %q, want the sha256 of the %d bytes staged", got, len(content))
	}
	var p handler.Payload
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &p); err != nil || len(p.Files) != 1 || p.Files[0].URI != up.URI ||
		p.Files[0].SHA256 != hex.EncodeToString(sum[:]) || p.Files[0].MimeType != "application/pdf" || p.Files[0].Size != int64(len(content)) {
		t.Fatalf("payload files %+v (%v)", p.Files, err)
	}
	if st, _ := w.Plat.StagedUpload(up.FileID); !st.Acked || st.Fetches != 1 {
		t.Fatalf("platform: acked %v, fetches %d; want acked after 1 fetch", st.Acked, st.Fetches)
	}
	t.Logf("round trip of %d bytes: canvas send to answer posted in %v", len(content), took)
}
