package filecache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// fixture is a double with one registered poll-mode workspace and a cache
// in a temporary directory.
type fixture struct {
	s     *moleculetest.Server
	w     moleculetest.Workspace
	cache *filecache.Cache
}

func newFixture(t *testing.T, opts ...moleculetest.Option) *fixture {
	t.Helper()
	s := moleculetest.NewServer(opts...)
	t.Cleanup(s.Close)
	w := s.CreateWorkspace("files")
	c, err := molecule.New(molecule.Config{PlatformURL: s.URL(), WorkspaceID: w.ID, Token: w.Token,
		RetryBaseInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background(), molecule.RegisterRequest{}); err != nil {
		t.Fatal(err)
	}
	return &fixture{s: s, w: w, cache: &filecache.Cache{Dir: t.TempDir(), Clients: map[string]*molecule.Client{w.ID: c}}}
}

func (f *fixture) message(atts ...events.Attachment) *events.Inbound {
	return &events.Inbound{WorkspaceID: f.w.ID, ActivityID: "act-1", Source: events.SourceCanvasUser, Attachments: atts}
}

func attachment(u moleculetest.Upload) events.Attachment {
	return events.Attachment{URI: u.URI, Name: u.Name, MimeType: u.MimeType, Size: int64(len(u.Content))}
}

// TestAttachmentHeldThenAckedOnce: a staged upload is downloaded into the
// cache (its bytes, size and SHA-256), acked, and a second delivery of the
// same message gets the same path without fetching or acking again.
func TestAttachmentHeldThenAckedOnce(t *testing.T) {
	f := newFixture(t)
	content := bytes.Repeat([]byte("scan "), 1000)
	u := f.s.StageUpload(f.w.ID, "scan page 1.png", "image/png", content)
	in := f.message(attachment(u))
	got, _ := f.cache.Fetch(context.Background(), in)
	if len(got) != 1 || got[0].Error != "" || got[0].Path == "" {
		t.Fatalf("Fetch: %+v, want one held file", got)
	}
	sum := sha256.Sum256(content)
	if b, err := os.ReadFile(got[0].Path); err != nil || !bytes.Equal(b, content) ||
		got[0].SHA256 != hex.EncodeToString(sum[:]) || got[0].Size != int64(len(content)) || got[0].MimeType != "image/png" ||
		!strings.HasSuffix(got[0].Path, "scan_page_1.png") {
		t.Fatalf("held %+v (read err %v); want the bytes, their sha256 and size under a safe name", got[0], err)
	}
	if st, _ := f.s.StagedUpload(u.FileID); !st.Acked || st.Fetches != 1 {
		t.Fatalf("platform after one Fetch: acked %v, fetches %d; want acked, 1", st.Acked, st.Fetches)
	}
	again, _ := f.cache.Fetch(context.Background(), in)
	if len(again) != 1 || again[0].Path != got[0].Path || again[0].SHA256 != got[0].SHA256 {
		t.Fatalf("second Fetch: %+v, want the same held file", again)
	}
	if st, _ := f.s.StagedUpload(u.FileID); st.Fetches != 1 {
		t.Fatalf("second Fetch downloaded again: %d fetches", st.Fetches)
	}
	acks := 0
	for _, r := range f.s.Requests() {
		if strings.HasSuffix(r.Path, "/ack") {
			acks++
		}
	}
	if acks != 1 {
		t.Fatalf("%d acks, want 1", acks)
	}
}

// TestAckFailureKeepsFileAndAcksOnRedelivery: the ack comes after the file
// is held, so when the platform fails the ack the handler still gets the
// file, and the next delivery acks it without downloading again.
func TestAckFailureKeepsFileAndAcksOnRedelivery(t *testing.T) {
	f := newFixture(t)
	u := f.s.StageUpload(f.w.ID, "a.txt", "text/plain", []byte("held"))
	f.s.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + f.w.ID + "/pending-uploads/", Status: http.StatusServiceUnavailable, Count: 1})
	in := f.message(attachment(u))
	got, _ := f.cache.Fetch(context.Background(), in)
	if got[0].Error != "" || got[0].Path == "" {
		t.Fatalf("Fetch with a failing ack: %+v, want the file held", got[0])
	}
	if st, _ := f.s.StagedUpload(u.FileID); st.Acked {
		t.Fatal("acked although the ack failed")
	}
	f.cache.Fetch(context.Background(), in)
	if st, _ := f.s.StagedUpload(u.FileID); !st.Acked || st.Fetches != 1 {
		t.Fatalf("after redelivery: acked %v, fetches %d; want acked, 1 fetch", st.Acked, st.Fetches)
	}
}

// TestUnfetchableAttachmentsSaySo: every attachment gets an entry, in
// order; one the relay cannot hold says why: over the cap, expired,
// another workspace's, a workspace: file of a poll-mode workspace (the
// platform's 422), a link.
func TestUnfetchableAttachmentsSaySo(t *testing.T) {
	f := newFixture(t)
	f.cache.MaxBytes = 10
	big := f.s.StageUpload(f.w.ID, "big.bin", "", bytes.Repeat([]byte("x"), 11))
	gone := f.s.StageUpload(f.w.ID, "gone.txt", "text/plain", []byte("gone"))
	f.s.ExpireUpload(gone.FileID)
	other := f.s.CreateWorkspace("other")
	theirs := f.s.StageUpload(other.ID, "theirs.txt", "text/plain", []byte("theirs"))
	ok := f.s.StageUpload(f.w.ID, "ok.txt", "text/plain", []byte("ok"))
	in := f.message(attachment(big), attachment(gone), attachment(theirs),
		events.Attachment{URI: "workspace:/workspace/out.png", Name: "out.png"},
		events.Attachment{URI: "https://example.com/x.pdf", Name: "x.pdf"},
		attachment(ok))
	got, _ := f.cache.Fetch(context.Background(), in)
	want := []string{"too large: over the relay's cap of 10 bytes", "gone: ", "refused: the upload belongs to workspace " + other.ID, "not fetched: ", "not fetched: the relay fetches", ""}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.URI != in.Attachments[i].URI || !strings.HasPrefix(g.Error, want[i]) || (g.Error == "") != (g.Path != "") {
			t.Errorf("entry %d: %+v, want error starting %q", i, g, want[i])
		}
	}
	if !strings.Contains(got[3].Error, "422") {
		t.Errorf("workspace: file: %q, want the platform's 422", got[3].Error)
	}
	if st, _ := f.s.StagedUpload(theirs.FileID); st.Fetches != 0 {
		t.Fatal("another workspace's upload was requested")
	}
	if st, _ := f.s.StagedUpload(big.FileID); st.Acked {
		t.Fatal("an upload the relay refused was acked")
	}
}

// TestPlatformDownIsTransient: an attachment the platform fails to serve
// (503, retried by the client) is reported with the reason and the error
// matches ErrTransient, so the dispatcher tries the message again; once
// the platform is back the file is held.
func TestPlatformDownIsTransient(t *testing.T) {
	f := newFixture(t)
	u := f.s.StageUpload(f.w.ID, "a.txt", "text/plain", []byte("later"))
	f.s.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + f.w.ID + "/pending-uploads/", Status: http.StatusServiceUnavailable})
	in := f.message(attachment(u))
	got, err := f.cache.Fetch(context.Background(), in)
	if !errors.Is(err, filecache.ErrTransient) || got[0].Error == "" {
		t.Fatalf("platform down: %+v, %v; want the reason and ErrTransient", got, err)
	}
	f.s.ClearFaults()
	got, err = f.cache.Fetch(context.Background(), in)
	if err != nil || got[0].Path == "" {
		t.Fatalf("platform back: %+v, %v", got, err)
	}
}
