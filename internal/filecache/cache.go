// Package filecache holds a message's attachments on local disk for its
// handler: each file is downloaded once into the relay's state directory
// (keyed by workspace and file), checked by size and SHA-256, made durable
// (fsynced) and only then acked to the platform, so a crash between the
// two fetches it again rather than losing it (docs/files.md).
//
// It runs where the handler runs (the dispatcher's process), so the path
// it hands over is one the handler can open.
package filecache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// DefaultMaxBytes is the default cap on one file: the TypeScript channel's
// (25 MiB) and the platform's own per-file cap at eaf7dbb. Larger files
// (the platform at aeec8e47 takes up to 100 MB) are refused with a reason
// unless the operator raises the cap.
const DefaultMaxBytes = molecule.MaxUploadBytes

// Cache fetches attachments into Dir.
type Cache struct {
	// Dir is the cache's root; files live under Dir/<workspace>/<key>/.
	Dir string
	// MaxBytes caps one file; if not set, DefaultMaxBytes.
	MaxBytes int64
	// Clients are the platform clients by workspace id; an attachment of
	// a workspace without one is reported as not fetched.
	Clients map[string]*molecule.Client
	// Lookup, when set, gives the client of a workspace not in Clients
	// (the workspace registry's, as it is now). It must be quick and safe
	// for concurrent use.
	Lookup func(workspace string) *molecule.Client
	// Logger logs fetch failures (never a token or content).
	Logger *slog.Logger
}

// meta is what the cache writes beside a held file, after the file itself
// is durable: its presence says the file is whole.
type meta struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
}

const (
	metaName  = ".meta.json"
	ackedName = ".acked"
)

// ErrTransient is matched by Fetch's error when an attachment failed for
// a reason that may pass (the platform unavailable, rate limited): the
// caller may try the message again later rather than hand the handler a
// reason.
var ErrTransient = errors.New("filecache: an attachment could not be fetched for now")

// Fetch returns one File per attachment of in, in order: a local path, or
// the reason there is none. The files are complete either way; the error,
// when set, matches ErrTransient.
func (c *Cache) Fetch(ctx context.Context, in *events.Inbound) ([]handler.File, error) {
	if len(in.Attachments) == 0 {
		return nil, nil
	}
	out := make([]handler.File, len(in.Attachments))
	var transient error
	for i, a := range in.Attachments {
		var err error
		out[i], err = c.fetch(ctx, in.WorkspaceID, a)
		if isTransient(err) && transient == nil {
			transient = fmt.Errorf("%w: %s: %v", ErrTransient, a.Name, err)
		}
	}
	return out, transient
}

// FetchOne holds one attachment of a message to workspace ws.
func (c *Cache) FetchOne(ctx context.Context, ws string, a events.Attachment) handler.File {
	f, _ := c.fetch(ctx, ws, a)
	return f
}

func (c *Cache) fetch(ctx context.Context, ws string, a events.Attachment) (handler.File, error) {
	f := handler.File{URI: a.URI, Name: a.Name, MimeType: a.MimeType, Size: a.Size}
	err := c.fetchOne(ctx, ws, &f)
	if err != nil {
		f.Path, f.SHA256, f.Error = "", "", err.Error()
		level := slog.LevelWarn
		if errors.Is(err, errLink) {
			level = slog.LevelDebug // a link is the handler's to open
		}
		c.logger().Log(ctx, level, "filecache: attachment not fetched", "workspace", ws, "error", err)
	}
	return f, err
}

// errLink: the attachment is a URI the relay does not fetch.
var errLink = errors.New("not fetched: the relay fetches platform-pending: and workspace: files; open this URI yourself")

func isTransient(err error) bool {
	return errors.Is(err, molecule.ErrPlatformUnavailable) || errors.Is(err, molecule.ErrRateLimited)
}

// source is how one URI is read and acked.
type source struct {
	key  string
	open func(ctx context.Context, max int64) (*molecule.Upload, error)
	ack  func(ctx context.Context) error // nil: nothing to ack
}

func (c *Cache) fetchOne(ctx context.Context, ws string, f *handler.File) error {
	src, err := c.sourceOf(ws, f.URI)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, ws, src.key)
	m, held := readMeta(dir)
	if !held {
		if m, err = c.download(ctx, dir, f, src); err != nil {
			return err
		}
	}
	f.Path, f.Size, f.SHA256 = filepath.Join(dir, m.Name), m.Size, m.SHA256
	if f.MimeType == "" {
		f.MimeType = m.MimeType
	}
	if src.ack != nil {
		c.ackOnce(ctx, dir, src)
	}
	return nil
}

// clientOf is ws's client in m, or else what lookup gives.
func clientOf(m map[string]*molecule.Client, lookup func(string) *molecule.Client, ws string) *molecule.Client {
	if c := m[ws]; c != nil || lookup == nil {
		return c
	}
	return lookup(ws)
}

// sourceOf checks uri and says how to read it.
func (c *Cache) sourceOf(ws, uri string) (source, error) {
	client := clientOf(c.Clients, c.Lookup, ws)
	switch {
	case strings.HasPrefix(uri, molecule.PendingScheme):
		owner, fid, err := molecule.ParsePendingURI(uri)
		if err != nil {
			return source{}, fmt.Errorf("refused: %v", err)
		}
		if owner != ws {
			return source{}, fmt.Errorf("refused: the upload belongs to workspace %s, not to this message's", owner)
		}
		if client == nil {
			return source{}, errors.New("not fetched: this process has no token for the workspace")
		}
		return source{key: fid,
			open: func(ctx context.Context, max int64) (*molecule.Upload, error) {
				return client.FetchUpload(ctx, fid, max)
			},
			ack: func(ctx context.Context) error { return client.AckUpload(ctx, fid) },
		}, nil
	case strings.HasPrefix(uri, molecule.WorkspaceScheme):
		p := strings.TrimPrefix(uri, molecule.WorkspaceScheme)
		if client == nil {
			return source{}, errors.New("not fetched: this process has no token for the workspace")
		}
		sum := sha256.Sum256([]byte(p))
		return source{key: "w-" + hex.EncodeToString(sum[:16]),
			open: func(ctx context.Context, max int64) (*molecule.Upload, error) {
				return client.DownloadWorkspaceFile(ctx, p, max)
			},
		}, nil
	default:
		return source{}, errLink
	}
}

// download writes the file to dir durably: a temporary file, fsynced,
// renamed, the directory fsynced, then the meta the same way.
func (c *Cache) download(ctx context.Context, dir string, f *handler.File, src source) (meta, error) {
	max := c.MaxBytes
	if max <= 0 {
		max = DefaultMaxBytes
	}
	up, err := src.open(ctx, max)
	if err != nil {
		return meta{}, reason(err, max)
	}
	defer up.Body.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return meta{}, fmt.Errorf("not held: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".part-*")
	if err != nil {
		return meta{}, fmt.Errorf("not held: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), up.Body)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return meta{}, reason(err, max)
	}
	m := meta{Name: safeName(f.Name), MimeType: up.MimeType, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if f.MimeType != "" {
		m.MimeType = f.MimeType
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, m.Name)); err != nil {
		return meta{}, fmt.Errorf("not held: %w", err)
	}
	b, _ := json.Marshal(m)
	if err := writeDurably(dir, metaName, b); err != nil {
		return meta{}, fmt.Errorf("not held: %w", err)
	}
	return m, nil
}

// ackOnce acks a held upload unless it was acked before; a failed ack is
// retried on the next delivery (the platform's ack is idempotent at
// aeec8e47, and an already-gone upload is held here anyway).
func (c *Cache) ackOnce(ctx context.Context, dir string, src source) {
	marker := filepath.Join(dir, ackedName)
	if _, err := os.Stat(marker); err == nil {
		return
	}
	err := src.ack(ctx)
	if err != nil && !errors.Is(err, molecule.ErrNotFound) {
		c.logger().WarnContext(ctx, "filecache: ack failed; retried on the next delivery", "error", err)
		return
	}
	_ = os.WriteFile(marker, nil, 0o600)
}

// reason turns a fetch error into what the handler is told.
func reason(err error, max int64) error {
	switch {
	case errors.Is(err, molecule.ErrResponseTooLarge):
		return fmt.Errorf("too large: over the relay's cap of %d bytes (MOLECULE_FILES_MAX_BYTES)", max)
	case errors.Is(err, molecule.ErrNotFound):
		return errors.New("gone: the platform no longer has this file (staged uploads expire 24 h after the upload)")
	default:
		return fmt.Errorf("not fetched: %w", err)
	}
}

func readMeta(dir string) (meta, bool) {
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	var m meta
	if err != nil || json.Unmarshal(b, &m) != nil || m.Name != safeName(m.Name) {
		return meta{}, false
	}
	st, err := os.Stat(filepath.Join(dir, m.Name))
	return m, err == nil && st.Size() == m.Size
}

// writeDurably writes name in dir through a fsynced temporary file and a
// rename, then fsyncs dir so the rename itself survives a crash.
func writeDurably(dir, name string, b []byte) error {
	tmp, err := os.CreateTemp(dir, ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._\-]`)

// safeName is the attachment's name as a file name in the cache: its base,
// only safe characters, never hidden (the cache's own files are), never
// empty.
func safeName(name string) string {
	base := unsafeChars.ReplaceAllString(filepath.Base(strings.ReplaceAll(name, `\`, "/")), "_")
	if len(base) > 100 {
		base = base[len(base)-100:]
	}
	base = strings.TrimLeft(base, ".")
	if base == "" {
		return "file"
	}
	return base
}

func (c *Cache) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Held opens the cache's copy of an attachment of workspace ws without
// asking the platform: ok is false when it holds none. Close the file.
func (c *Cache) Held(ws, uri string) (f *os.File, mime string, ok bool) {
	src, err := c.sourceOf(ws, uri)
	if err != nil {
		return nil, "", false
	}
	dir := filepath.Join(c.Dir, ws, src.key)
	m, held := readMeta(dir)
	if !held {
		return nil, "", false
	}
	f, err = os.Open(filepath.Join(dir, m.Name))
	if err != nil {
		return nil, "", false
	}
	return f, m.MimeType, true
}
