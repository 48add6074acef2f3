package filecache

// Outbound files: a handler's answer (or send_message_to_user) may attach
// a local file; it is uploaded with POST /workspaces/:id/chat/uploads
// (enteros-core aeec8e47 handlers/chat_files.go 638-826) where the file
// is, and the platform's URI replaces the path. The upload is not
// idempotent on the platform, so its answer is recorded in NATS KV before
// the reply is posted: a retry of the same answer reuses the recorded
// URI instead of uploading again (docs/files.md).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Uploader uploads the local files of answers.
type Uploader struct {
	// Clients are the platform clients by workspace id.
	Clients map[string]*molecule.Client
	// Lookup, when set, gives the client of a workspace not in Clients
	// (the workspace registry's, as it is now). It must be quick and safe
	// for concurrent use.
	Lookup func(workspace string) *molecule.Client
	// Records is where each upload's answer is kept (the dispatcher's
	// handled bucket), keyed by workspace, answer and file.
	Records jetstream.KeyValue
	// MaxBytes caps one file; if not set, DefaultMaxBytes.
	MaxBytes int64
	// Secrets are the workspace tokens: a file that holds one (a token
	// file, a .env) is refused, so no answer posts the relay's credentials
	// to the chat.
	Secrets []string
	// MoreSecrets, when set, gives more tokens at each upload (the
	// workspace registry's, which change while the relay runs).
	MoreSecrets func() []string
}

// LocalPath is the path a local attachment names (file:///x or /x).
func LocalPath(uri string) (string, bool) {
	p := strings.TrimPrefix(uri, "file://")
	return p, filepath.IsAbs(p)
}

// HasLocal says whether any attachment names a local file.
func HasLocal(atts []events.Attachment) bool {
	for _, a := range atts {
		if _, ok := LocalPath(a.URI); ok {
			return true
		}
	}
	return false
}

// Upload returns atts with every local file replaced by its upload to
// workspace ws, answer naming the answer (an activity id, an idempotency
// key): uploaded once per answer and file content. A file that cannot be
// read, or is too large, is a permanent error naming it; a platform
// failure is returned as is (retry).
func (u *Uploader) Upload(ctx context.Context, ws, answer string, atts []events.Attachment) ([]events.Attachment, error) {
	out := make([]events.Attachment, len(atts))
	for i, a := range atts {
		p, ok := LocalPath(a.URI)
		if !ok {
			out[i] = a
			continue
		}
		up, err := u.uploadOne(ctx, ws, answer, p, a)
		if err != nil {
			return nil, err
		}
		out[i] = up
	}
	return out, nil
}

func (u *Uploader) uploadOne(ctx context.Context, ws, answer, path string, a events.Attachment) (events.Attachment, error) {
	c := clientOf(u.Clients, u.Lookup, ws)
	if c == nil {
		return events.Attachment{}, fmt.Errorf("%w: attachment %s: this process has no token for workspace %s", handler.ErrPermanent, path, ws)
	}
	content, err := readLocal(path, u.maxBytes())
	if err == nil && u.holdsSecret(content) {
		err = errors.New("it holds a workspace token; it is not uploaded")
	}
	if err != nil {
		return events.Attachment{}, fmt.Errorf("%w: attachment %s: %v", handler.ErrPermanent, path, err)
	}
	sum := sha256.Sum256(content)
	key := uploadKey(ws, answer, path, sum[:])
	if e, err := u.Records.Get(ctx, key); err == nil {
		var done events.Attachment
		if json.Unmarshal(e.Value(), &done) == nil && done.URI != "" {
			return done, nil
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.Attachment{}, fmt.Errorf("filecache: upload record of %s: %w", path, err)
	}
	name := a.Name
	if name == "" {
		name = filepath.Base(path)
	}
	got, err := c.UploadChatFiles(ctx, []molecule.LocalFile{{Name: name, MimeType: a.MimeType, Content: content}})
	if err != nil {
		if refusal := uploadRefusal(err); refusal != nil {
			return events.Attachment{}, fmt.Errorf("%w: attachment %s: %v", handler.ErrPermanent, path, refusal)
		}
		return events.Attachment{}, fmt.Errorf("filecache: upload %s: %w", path, err)
	}
	done := events.Attachment{URI: got[0].URI, Name: got[0].Name, MimeType: got[0].MimeType, Size: got[0].Size}
	b, _ := json.Marshal(done)
	if _, err := u.Records.Put(ctx, key, b); err != nil {
		// Uploaded but not recorded: a retry uploads again (one staged
		// duplicate, which the platform drops after 24 h).
		return events.Attachment{}, fmt.Errorf("filecache: record the upload of %s: %w", path, err)
	}
	return done, nil
}

// uploadRefusal is the platform's answer that retrying cannot change: too
// large (413), malformed (400), a workspace it cannot stage for (422).
func uploadRefusal(err error) error {
	var ae *molecule.APIError
	if errors.As(err, &ae) && (ae.StatusCode == 400 || ae.StatusCode == 413 || ae.StatusCode == 422) {
		return err
	}
	return nil
}

func readLocal(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		return nil, fmt.Errorf("larger than the cap of %d bytes (MOLECULE_FILES_MAX_BYTES)", max)
	}
	return b, err
}

func (u *Uploader) holdsSecret(content []byte) bool {
	var more []string
	if u.MoreSecrets != nil {
		more = u.MoreSecrets()
	}
	return holdsAny(content, append(more, u.Secrets...))
}

func (u *Uploader) maxBytes() int64 {
	if u.MaxBytes > 0 {
		return u.MaxBytes
	}
	return DefaultMaxBytes
}

// uploadKey names one file of one answer: its workspace, then a digest of
// the answer, the path and the content.
func uploadKey(ws, answer, path string, sum []byte) string {
	h := sha256.New()
	for _, p := range []string{answer, path, string(sum)} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return ws + ".upload." + hex.EncodeToString(h.Sum(nil))[:32]
}
