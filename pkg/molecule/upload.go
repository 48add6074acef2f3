package molecule

// Staged chat uploads of NEW poll-mode platforms (docs/protocol.md,
// "Staged uploads"): a canvas upload to a poll-mode workspace is kept on
// the platform as a pending_uploads row, named platform-pending:<ws>/<file_id>,
// and read with GET /workspaces/:id/pending-uploads/:file_id/content.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/google/uuid"
)

// PendingScheme is the URI scheme of a staged upload.
const PendingScheme = "platform-pending:"

// MaxUploadBytes is the default cap on a fetched upload: the platform's
// per-file cap at eaf7dbb (pendinguploads.MaxFileBytes, storage.go 47) and
// the TypeScript channel's. The platform at aeec8e47 allows up to
// MaxChatUploadBytes, which a caller may ask for.
const MaxUploadBytes = 25 << 20

// ParsePendingURI splits platform-pending:<ws>/<file_id>. Both parts must
// be UUIDs, so no path trick ("..", "/", "%2F") can reach another route.
func ParsePendingURI(uri string) (workspaceID, fileID string, err error) {
	rest, ok := strings.CutPrefix(uri, PendingScheme)
	ws, fid, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !isUUID(ws) || !isUUID(fid) {
		return "", "", fmt.Errorf("%w: %s is not platform-pending:<workspace uuid>/<file uuid>", ErrInvalidArgument, quoteCut(uri))
	}
	return ws, fid, nil
}

// Upload is a staged upload's content, open for reading. Close it.
type Upload struct {
	Body     io.ReadCloser
	MimeType string
	// Size is the platform's Content-Length (-1 when it sent none).
	Size int64
}

// FetchUpload opens a staged upload of this workspace. The body fails with
// ErrResponseTooLarge past max bytes (MaxUploadBytes if max <= 0, at most
// MaxChatUploadBytes). A 404 (no
// such file, expired after 24 h, or already acked) matches ErrNotFound.
func (c *Client) FetchUpload(ctx context.Context, fileID string, max int64) (*Upload, error) {
	if !isUUID(fileID) {
		return nil, fmt.Errorf("%w: file id %s is not a UUID", ErrInvalidArgument, quoteCut(fileID))
	}
	if max <= 0 {
		max = MaxUploadBytes
	}
	r := request{method: http.MethodGet, path: c.selfPath("/pending-uploads/" + fileID + "/content"), accept: "*/*", noTimeout: true}
	resp, err := c.openStream(ctx, c.hc, r, maxErrorBody)
	if err != nil {
		return nil, err
	}
	return cappedUpload(resp, fileID, max)
}

// cappedUpload wraps a 200 answer's body so it fails with
// ErrResponseTooLarge past max bytes (at most MaxChatUploadBytes).
func cappedUpload(resp *http.Response, what string, max int64) (*Upload, error) {
	if max <= 0 || max > MaxChatUploadBytes {
		max = MaxChatUploadBytes
	}
	if resp.ContentLength > max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, cap %d", ErrResponseTooLarge, quoteCut(what), resp.ContentLength, max)
	}
	capped := &cappedReader{r: resp.Body, max: max, err: fmt.Errorf("%w: %s exceeds %d bytes", ErrResponseTooLarge, quoteCut(what), max)}
	return &Upload{
		Body: struct {
			io.Reader
			io.Closer
		}{capped, resp.Body},
		MimeType: resp.Header.Get("Content-Type"),
		Size:     resp.ContentLength,
	}, nil
}

// AckUpload tells the platform the upload was handed off; after it the
// content is gone (GET answers 404) and a second ack answers 404 too.
func (c *Client) AckUpload(ctx context.Context, fileID string) error {
	if !isUUID(fileID) {
		return fmt.Errorf("%w: file id %s is not a UUID", ErrInvalidArgument, quoteCut(fileID))
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: c.selfPath("/pending-uploads/" + fileID + "/ack")})
	return err
}

// WorkspaceScheme is the scheme of a file in a push-mode workspace's
// container (workspace:/workspace/...), read with GET
// /workspaces/:id/chat/download?path=.
const WorkspaceScheme = "workspace:"

// MaxChatUploadBytes is the platform's cap on one chat upload's multipart
// body and on each of its files at aeec8e47 (uploads/limits.go 97-98).
const MaxChatUploadBytes = 100 << 20

// LocalFile is one file to upload: its name, MIME type ("" lets the
// platform store none) and content.
type LocalFile struct {
	Name, MimeType string
	Content        []byte
}

// UploadChatFiles uploads files with a multipart POST
// /workspaces/:id/chat/uploads (one "files" part each) and returns what
// the platform stored: each file's URI (platform-pending:<ws>/<file_id>
// for a poll-mode workspace), sanitised name, MIME type and size, for a
// notify's attachments. The platform stages all or none; it is not
// idempotent, so a caller that retries records the URIs first.
func (c *Client) UploadChatFiles(ctx context.Context, files []LocalFile) ([]Attachment, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no files to upload", ErrInvalidArgument)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="files"; filename=%q`, f.Name))
		if f.MimeType != "" {
			h.Set("Content-Type", f.MimeType)
		}
		pw, err := mw.CreatePart(h)
		if err != nil {
			return nil, err
		}
		_, _ = pw.Write(f.Content)
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: c.selfPath("/chat/uploads"), rawBody: buf.Bytes(),
		header: http.Header{"Content-Type": {mw.FormDataContentType()}}, noTimeout: true})
	if err != nil {
		return nil, err
	}
	var out struct {
		Files []Attachment `json:"files"`
	}
	r := request{method: http.MethodPost, path: c.selfPath("/chat/uploads")}
	if err := decodeJSON(r, resp.body, &out); err != nil {
		return nil, err
	}
	if len(out.Files) != len(files) {
		return nil, fmt.Errorf("%w: %d files uploaded, the platform answered %d", ErrPlatformUnavailable, len(files), len(out.Files))
	}
	return out.Files, nil
}

// DownloadWorkspaceFile opens a file of this workspace's container with
// GET /workspaces/:id/chat/download?path= (chat_files.go 459), capped at
// max bytes. A poll-mode workspace has no container the platform can
// reach: the platform answers 422.
func (c *Client) DownloadWorkspaceFile(ctx context.Context, path string, max int64) (*Upload, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("%w: %s is not an absolute path", ErrInvalidArgument, quoteCut(path))
	}
	r := request{method: http.MethodGet, path: c.selfPath("/chat/download"), query: url.Values{"path": {path}}, accept: "*/*", noTimeout: true}
	resp, err := c.openStream(ctx, c.hc, r, maxErrorBody)
	if err != nil {
		return nil, err
	}
	return cappedUpload(resp, path, max)
}

// isUUID accepts the canonical 8-4-4-4-12 form only (uuid.Validate also
// takes braces, a urn: prefix and 32 bare hex digits).
func isUUID(s string) bool { return len(s) == 36 && uuid.Validate(s) == nil }
