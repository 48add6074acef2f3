package molecule

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Plugin installation errors. Match them with errors.Is.
var (
	// ErrUnsafeArchive: the plugin archive has an entry that could escape
	// the plugin directory or is not a plain file or directory (absolute
	// path, "..", symlink, hard link, device, fifo). Nothing is installed.
	ErrUnsafeArchive = errors.New("molecule: unsafe plugin archive")
	// ErrPluginTooLarge: the download, its extracted content or its entry
	// count exceeds the cap (or the platform answered 413). Nothing is
	// installed.
	ErrPluginTooLarge = errors.New("molecule: plugin too large")
	// ErrPluginHashMismatch: the extracted content's PluginHash is not
	// PluginOptions.ExpectedSHA256. Nothing is installed.
	ErrPluginHashMismatch = errors.New("molecule: plugin content hash mismatch")
)

// Plugin installation defaults.
const (
	// DefaultPluginMaxBytes caps the download and the extracted content:
	// 100 MiB, the platform's own PLUGIN_INSTALL_MAX_DIR_BYTES default.
	DefaultPluginMaxBytes = 100 << 20
	// DefaultPluginMaxEntries caps the number of archive entries.
	DefaultPluginMaxEntries = 10000
	// DefaultPluginTimeout bounds a download whose context has no
	// deadline: the platform's own fetch timeout.
	DefaultPluginTimeout = 5 * time.Minute
)

// PluginOptions configures InstallPlugin.
type PluginOptions struct {
	// Dir is the plugins directory; the plugin is installed as Dir/<name>.
	// Required. It is created (0755) if missing.
	Dir string
	// Source is sent as ?source= (e.g. "github://org/repo#v1"). If not
	// set, none is sent and the platform uses local://<name>.
	Source string
	// MaxBytes caps both the downloaded archive and the total size of the
	// extracted files. If not set, DefaultPluginMaxBytes (100 MiB).
	MaxBytes int64
	// MaxEntries caps the number of archive entries. If not set,
	// DefaultPluginMaxEntries (10,000).
	MaxEntries int
	// ExpectedSHA256 is the PluginHash the extracted content must have
	// (64 hex digits, any case). If not set, the content is not checked.
	ExpectedSHA256 string
	// Timeout bounds the download when ctx has no deadline. If not set,
	// DefaultPluginTimeout (5 minutes).
	Timeout time.Duration
}

// InstalledPlugin describes a completed installation.
type InstalledPlugin struct {
	// Name is the plugin name.
	Name string
	// Path is Dir/<name>.
	Path string
	// Source is the platform's X-Plugin-Source header ("" if absent).
	Source string
	// SHA256 is the PluginHash of the installed content.
	SHA256 string
	// Files and Bytes count the regular files extracted and their size.
	Files int
	Bytes int64
	// Replaced is true when an earlier install of the same name was
	// replaced.
	Replaced bool
}

// InstallPlugin downloads plugin name (GET
// /workspaces/<self>/plugins/<name>/download, a gzip tar) and installs it as
// opts.Dir/<name>. Extraction is safe: only regular files and directories,
// with modes reduced to 0644 or 0755; an absolute path, a ".." escape, a
// symlink, a hard link, a device or a fifo fails the whole install with
// ErrUnsafeArchive naming the entry. Size and entry caps fail with
// ErrPluginTooLarge, a wrong ExpectedSHA256 with ErrPluginHashMismatch.
//
// The archive is extracted into a temporary directory inside opts.Dir and
// renamed into place only when complete and verified, so a failure leaves
// nothing behind and an existing install untouched. An existing install is
// replaced by renaming it aside, renaming the new one in and removing the
// old one; between the two renames Dir/<name> is briefly absent. Concurrent
// installs of the same name into one Dir are not supported.
//
// A non-200 answer is an *APIError (401 ErrUnauthorized, 404
// ErrNotFound or ErrTenantRouting, 413 ErrPluginTooLarge, 429
// ErrRateLimited, 502/503/504 ErrPlatformUnavailable). Unlike Python SDK,
// it never runs a setup script: what to run is the caller's decision.
func (c *Client) InstallPlugin(ctx context.Context, name string, opts PluginOptions) (*InstalledPlugin, error) {
	if err := validPluginName(name); err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: PluginOptions.Dir is required", ErrInvalidArgument)
	}
	want := strings.ToLower(opts.ExpectedSHA256)
	if want != "" {
		if b, err := hex.DecodeString(want); err != nil || len(b) != 32 {
			return nil, fmt.Errorf("%w: ExpectedSHA256 must be 64 hex digits", ErrInvalidArgument)
		}
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultPluginMaxBytes
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultPluginMaxEntries
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultPluginTimeout
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}

	resp, reqPath, err := c.downloadPlugin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("molecule: plugin %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(opts.Dir, ".molecule-plugin-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("molecule: plugin %s: %w", name, err)
	}
	installed := false
	defer func() {
		if !installed {
			_ = os.RemoveAll(tmp)
		}
	}()

	body := &cappedReader{r: resp.Body, max: opts.MaxBytes, err: fmt.Errorf("%w: archive exceeds %d bytes", ErrPluginTooLarge, opts.MaxBytes)}
	files, size, err := extractPlugin(body, tmp, opts)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrUnsafeArchive) && !errors.Is(err, ErrPluginTooLarge) {
			return nil, fmt.Errorf("molecule: plugin %s: GET %s: %w", name, reqPath, ctx.Err())
		}
		return nil, fmt.Errorf("molecule: plugin %s: %w", name, err)
	}
	sum, err := PluginHash(tmp)
	if err != nil {
		return nil, err
	}
	if want != "" && sum != want {
		return nil, fmt.Errorf("%w: plugin %s: content hash %s, expected %s", ErrPluginHashMismatch, name, sum, want)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("molecule: plugin %s: %w", name, err)
	}

	final := filepath.Join(opts.Dir, name)
	replaced, err := swapIn(tmp, final, opts.Dir, name, c.logger())
	if err != nil {
		return nil, fmt.Errorf("molecule: plugin %s: %w", name, err)
	}
	installed = true
	c.logger().Debug("molecule: plugin installed", "plugin", name, "files", files, "bytes", size, "sha256", sum, "replaced", replaced)
	return &InstalledPlugin{
		Name:     name,
		Path:     final,
		Source:   resp.Header.Get("X-Plugin-Source"),
		SHA256:   sum,
		Files:    files,
		Bytes:    size,
		Replaced: replaced,
	}, nil
}

func (c *Client) logger() *slog.Logger {
	if c.cfg.Logger != nil {
		return c.cfg.Logger
	}
	return slog.Default()
}

// validPluginName allows [A-Za-z0-9._-], not "." or "..", at most 255 bytes.
func validPluginName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: plugin name %s %s", ErrInvalidArgument, quoteCut(name), why)
	}
	if name == "" {
		return bad("is empty")
	}
	if name == "." || name == ".." {
		return bad("is not a name")
	}
	if len(name) > 255 {
		return bad("is longer than 255 bytes")
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			return bad("may only hold letters, digits, '.', '_' and '-'")
		}
	}
	return nil
}

// downloadPlugin sends the GET and returns the 200 response with its body
// open. It shares the client's request building, rate-limit accounting and
// error classification (http.go) but not Client.do, which reads a body
// whole under MaxResponseBytes: an archive is streamed under its own cap.
func (c *Client) downloadPlugin(ctx context.Context, name string, opts PluginOptions) (*http.Response, string, error) {
	r := request{
		method: http.MethodGet,
		path:   c.selfPath("/plugins/" + url.PathEscape(name) + "/download"),
		accept: "application/gzip",
		// The archive is bounded by opts.Timeout, not RequestTimeout.
		noTimeout: true,
	}
	if opts.Source != "" {
		r.query = url.Values{"source": {opts.Source}}
	}
	// An error body is small; an oversized one is cut, not an error.
	resp, err := c.openStream(ctx, r, 64<<10)
	if e, ok := errors.AsType[*APIError](err); ok && e.StatusCode == http.StatusRequestEntityTooLarge {
		e.kind = ErrPluginTooLarge
	}
	if err != nil {
		return nil, r.path, err
	}
	if resp.ContentLength > opts.MaxBytes {
		resp.Body.Close()
		return nil, r.path, fmt.Errorf("%w: plugin %s: archive is %d bytes, cap %d", ErrPluginTooLarge, name, resp.ContentLength, opts.MaxBytes)
	}
	return resp, r.path, nil
}

// extractPlugin extracts the gzip tar r into dir (which is empty and ours:
// no symlink is ever created in it, so no entry can be redirected).
func extractPlugin(r io.Reader, dir string, opts PluginOptions) (files int, size int64, err error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return 0, 0, fmt.Errorf("reading gzip: %w", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	entries := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reading tar: %w", err)
		}
		entries++
		if entries > opts.MaxEntries {
			return 0, 0, fmt.Errorf("%w: more than %d entries", ErrPluginTooLarge, opts.MaxEntries)
		}
		unsafe := func(why string) error {
			return fmt.Errorf("%w: entry %s: %s", ErrUnsafeArchive, quoteCut(hdr.Name), why)
		}
		switch hdr.Typeflag {
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink:
			return 0, 0, unsafe("symbolic link to " + quoteCut(hdr.Linkname))
		case tar.TypeLink:
			return 0, 0, unsafe("hard link to " + quoteCut(hdr.Linkname))
		case tar.TypeChar, tar.TypeBlock:
			return 0, 0, unsafe("device")
		case tar.TypeFifo:
			return 0, 0, unsafe("fifo")
		default:
			return 0, 0, unsafe(fmt.Sprintf("unsupported entry type %q", hdr.Typeflag))
		}
		rel, err := localEntryPath(hdr.Name)
		if err != nil {
			return 0, 0, unsafe(err.Error())
		}
		if rel == "." {
			// "./": the plugin root itself.
			if hdr.Typeflag != tar.TypeDir {
				return 0, 0, unsafe("not a file name")
			}
			continue
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				return 0, 0, err
			}
			if err := os.Chmod(target, 0o755); err != nil {
				return 0, 0, err
			}
			continue
		}
		if hdr.Size > opts.MaxBytes-size {
			return 0, 0, fmt.Errorf("%w: extracted content exceeds %d bytes at entry %s", ErrPluginTooLarge, opts.MaxBytes, quoteCut(hdr.Name))
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return 0, 0, err
		}
		mode := os.FileMode(0o644)
		if hdr.Mode&0o111 != 0 {
			mode = 0o755
		}
		if err := writeEntry(target, tr, hdr.Size, mode); err != nil {
			return 0, 0, err
		}
		size += hdr.Size
		files++
	}
	// Read to the end of the gzip stream so its checksum is verified and a
	// truncated download is an error.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return 0, 0, fmt.Errorf("reading gzip: %w", err)
	}
	return files, size, nil
}

// localEntryPath cleans a tar entry name and refuses anything that is not
// a relative path inside the root.
func localEntryPath(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.ContainsRune(name, 0) {
		return "", errors.New("NUL in name")
	}
	if strings.Contains(name, `\`) {
		return "", errors.New(`backslash in name`)
	}
	if path.IsAbs(name) || filepath.IsAbs(name) || filepath.VolumeName(name) != "" {
		return "", errors.New("absolute path")
	}
	clean := path.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errors.New(`escapes the plugin directory with ".."`)
	}
	if clean != "." && !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "", errors.New("not a local path")
	}
	return clean, nil
}

// writeEntry writes exactly size bytes of r to a new file at target.
func writeEntry(target string, r io.Reader, size int64, mode os.FileMode) error {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", target, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// swapIn renames tmp to final, moving an existing final aside first and
// removing it afterwards; if the second rename fails, the old one is put
// back.
func swapIn(tmp, final, dir, name string, log *slog.Logger) (replaced bool, err error) {
	if _, err := os.Lstat(final); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		return false, os.Rename(tmp, final)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, err
	}
	old := filepath.Join(dir, ".molecule-plugin-old-"+name+"-"+hex.EncodeToString(rnd[:]))
	if err := os.Rename(final, old); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, final); err != nil {
		if rerr := os.Rename(old, final); rerr != nil {
			return false, fmt.Errorf("%w (and restoring the previous install from %s failed: %w)", err, old, rerr)
		}
		return false, err
	}
	if err := os.RemoveAll(old); err != nil {
		log.Warn("molecule: could not remove the replaced plugin", "plugin", name, "path", old, "err", err)
	}
	return true, nil
}
