package molecule_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestChatUploadToPollWorkspaceStagesPendingUploads: a multipart POST
// /chat/uploads to a poll-mode workspace answers {"files":[{uri, name,
// mimeType, size}]} with a platform-pending URI per file, the name
// sanitised and the MIME type cut to type/subtype, and the bytes are
// readable as a staged upload (enteros-core aeec8e47
// workspace-server/internal/handlers/chat_files.go 638-826, 582-602,
// 840-863).
func TestChatUploadToPollWorkspaceStagesPendingUploads(t *testing.T) {
	s := platform(t)
	w, c := registered(t, s, "up")
	ctx := context.Background()
	got, err := c.UploadChatFiles(ctx, []molecule.LocalFile{
		{Name: "my report (final).pdf", MimeType: "application/pdf; x=y", Content: []byte("%PDF")},
		{Name: "../../etc/notes.txt", Content: []byte("hello")},
	})
	if err != nil {
		t.Fatalf("UploadChatFiles: %v", err)
	}
	if len(got) != 2 || got[0].Name != "my_report__final_.pdf" || got[0].MimeType != "application/pdf" || got[0].Size != 4 ||
		got[1].Name != "notes.txt" || got[1].MimeType != "" {
		t.Fatalf("answer %+v; want sanitised names, type/subtype, sizes", got)
	}
	for i, a := range got {
		ws, fid, err := molecule.ParsePendingURI(a.URI)
		if err != nil || ws != w.ID {
			t.Fatalf("file %d uri %s: %v", i, a.URI, err)
		}
		up, err := c.FetchUpload(ctx, fid, 0)
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		b, _ := io.ReadAll(up.Body)
		up.Body.Close()
		if want := []string{"%PDF", "hello"}[i]; string(b) != want {
			t.Fatalf("file %d content %q, want %q", i, b, want)
		}
	}
}

// TestChatUploadRefusals: a file past the per-file cap is 413 and stages
// nothing (pre-validation, chat_files.go 690-720); a request without a
// "files" part is 400 (655).
func TestChatUploadRefusals(t *testing.T) {
	s := platform(t, moleculetest.WithGeneration(moleculetest.Gen2026_05)) // 25 MiB per file (eaf7dbb storage.go 47)
	w, c := registered(t, s, "up")
	ctx := context.Background()
	_, err := c.UploadChatFiles(ctx, []molecule.LocalFile{
		{Name: "small.txt", Content: []byte("ok")},
		{Name: "big.bin", Content: bytes.Repeat([]byte("x"), 25<<20+1)},
	})
	var ae *molecule.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(ae.Body, "big.bin") {
		t.Fatalf("over the per-file cap: %v, want 413 naming big.bin", err)
	}
	if rows := s.Rows(w.ID); len(rows) != 0 {
		t.Fatalf("a refused batch staged %d rows, want none", len(rows))
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/workspaces/"+w.ID+"/chat/uploads", strings.NewReader("--b--\r\n"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	req.Header.Set("Authorization", "Bearer "+w.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no files part: %v %v, want 400", resp, err)
	}
	resp.Body.Close()
}

// TestChatDownloadOfPollWorkspaceIs422: GET /chat/download checks the
// path first (400 for a relative, unrooted or non-canonical one,
// chat_files.go 418-442), then forwards to the workspace's own URL,
// which a poll-mode workspace has none of: 422
// (resolveWorkspaceForwardCreds, 224-231).
func TestChatDownloadOfPollWorkspaceIs422(t *testing.T) {
	s := platform(t)
	_, c := registered(t, s, "dl")
	ctx := context.Background()
	_, err := c.DownloadWorkspaceFile(ctx, "/workspace/out.png", 0)
	var ae *molecule.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("download from a poll-mode workspace: %v, want 422", err)
	}
	for _, p := range []string{"/etc/passwd", "/workspace/../etc/passwd", "/workspace//x"} {
		_, err := c.DownloadWorkspaceFile(ctx, p, 0)
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest {
			t.Errorf("download %s: %v, want 400", p, err)
		}
	}
}
