package molecule_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestStagedUploadFetchThenAckThenGone finds a staged upload's manifest row
// on the feed, fetches its bytes with
// the platform's content type, acks it, and then finds it gone (404) for a
// fetch and a second ack, as the platform's handler does at eaf7dbb
// (pendinguploads/storage.go 313: Get skips acked rows).
func TestStagedUploadFetchThenAckThenGone(t *testing.T) {
	s := platform(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	w, c := registered(t, s, "files")
	content := []byte("%PDF-1.7 not really\x00\x01")
	u := s.StageUpload(w.ID, "report.pdf", "application/pdf", content)
	ws, fid, err := molecule.ParsePendingURI(u.URI)
	if err != nil || ws != w.ID || fid != u.FileID {
		t.Fatalf("ParsePendingURI(%s) = %s, %s, %v", u.URI, ws, fid, err)
	}
	if rows := s.Rows(w.ID); len(rows) != 1 || !strings.Contains(string(rows[0]), `"method":"chat_upload_receive"`) || !strings.Contains(string(rows[0]), u.URI) {
		t.Fatalf("feed after staging: %s; want one chat_upload_receive manifest naming %s", rows, u.URI)
	}
	ctx := context.Background()
	up, err := c.FetchUpload(ctx, fid, 0)
	if err != nil {
		t.Fatalf("FetchUpload: %v", err)
	}
	got, err := io.ReadAll(up.Body)
	up.Body.Close()
	if err != nil || !bytes.Equal(got, content) || up.MimeType != "application/pdf" || up.Size != int64(len(content)) {
		t.Fatalf("fetched %q (%s, %d), %v; want %q application/pdf", got, up.MimeType, up.Size, err, content)
	}
	if err := c.AckUpload(ctx, fid); err != nil {
		t.Fatalf("AckUpload: %v", err)
	}
	if _, err := c.FetchUpload(ctx, fid, 0); !errors.Is(err, molecule.ErrNotFound) {
		t.Fatalf("fetch after ack: %v, want ErrNotFound", err)
	}
	if err := c.AckUpload(ctx, fid); !errors.Is(err, molecule.ErrNotFound) {
		t.Fatalf("second ack: %v, want ErrNotFound (the handler looks the row up first)", err)
	}
}

// TestStagedUploadRefusals: another workspace's file is 404, a bad token
// 401, a body over the cap ErrResponseTooLarge, and a malformed file id or
// URI is refused before any request.
func TestStagedUploadRefusals(t *testing.T) {
	s := platform(t)
	a, ca := registered(t, s, "a")
	b, _ := registered(t, s, "b")
	ctx := context.Background()
	ub := s.StageUpload(b.ID, "b.txt", "text/plain", []byte("b's secret"))
	if _, err := ca.FetchUpload(ctx, ub.FileID, 0); !errors.Is(err, molecule.ErrNotFound) {
		t.Fatalf("a fetching b's upload: %v, want ErrNotFound", err)
	}
	ua := s.StageUpload(a.ID, "big.bin", "", bytes.Repeat([]byte("x"), 100))
	if _, err := ca.FetchUpload(ctx, ua.FileID, 99); !errors.Is(err, molecule.ErrResponseTooLarge) {
		t.Fatalf("100 bytes under a 99-byte cap: %v, want ErrResponseTooLarge", err)
	}
	up, err := ca.FetchUpload(ctx, ua.FileID, 100)
	if err != nil || up.MimeType != "application/octet-stream" {
		t.Fatalf("fetch at the cap: %v (mime %q), want octet-stream", err, up.MimeType)
	}
	up.Body.Close()
	bad := clientFor(t, s, a, func(c *molecule.Config) { c.Token = "wrong" })
	if _, err := bad.FetchUpload(ctx, ua.FileID, 0); !errors.Is(err, molecule.ErrUnauthorized) {
		t.Fatalf("wrong token: %v, want ErrUnauthorized", err)
	}
	for _, fid := range []string{"../state", "x", ua.FileID + "/../x", strings.ToUpper(ua.FileID) + "%2F"} {
		if _, err := ca.FetchUpload(ctx, fid, 0); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Errorf("FetchUpload(%q): %v, want ErrInvalidArgument", fid, err)
		}
	}
	for _, uri := range []string{"workspace:/x", "platform-pending:" + a.ID, "platform-pending:" + a.ID + "/../" + ua.FileID,
		"platform-pending:" + a.ID + "/" + ua.FileID + "/x", "platform-pending:/" + ua.FileID} {
		if _, _, err := molecule.ParsePendingURI(uri); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Errorf("ParsePendingURI(%q): %v, want ErrInvalidArgument", uri, err)
		}
	}
}

// TestStagedUploadStaysReadableAfterAck2026_08: at aeec8e47 an acked
// upload is still served (the canvas previews it after a refresh) and a
// second ack is 200, idempotent (enteros-core aeec8e47
// workspace-server/internal/pendinguploads/storage.go 322-336, 373-419;
// handlers/pending_uploads.go 66-70).
func TestStagedUploadStaysReadableAfterAck2026_08(t *testing.T) {
	s := platform(t)
	w, c := registered(t, s, "files")
	u := s.StageUpload(w.ID, "a.txt", "text/plain", []byte("kept"))
	ctx := context.Background()
	for i := range 2 {
		if err := c.AckUpload(ctx, u.FileID); err != nil {
			t.Fatalf("ack %d: %v, want 200", i+1, err)
		}
	}
	up, err := c.FetchUpload(ctx, u.FileID, 0)
	if err != nil {
		t.Fatalf("fetch after ack: %v, want the bytes", err)
	}
	b, _ := io.ReadAll(up.Body)
	up.Body.Close()
	if string(b) != "kept" {
		t.Fatalf("fetched %q after ack", b)
	}
	if got, _ := s.StagedUpload(u.FileID); !got.Acked {
		t.Fatal("the double does not record the ack")
	}
}
