package molecule

// Staged chat uploads of NEW poll-mode platforms (docs/protocol.md,
// "Staged uploads"): a canvas upload to a poll-mode workspace is kept on
// the platform as a pending_uploads row, named platform-pending:<ws>/<file_id>,
// and read with GET /workspaces/:id/pending-uploads/:file_id/content.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/uuid"
)

// PendingScheme is the URI scheme of a staged upload.
const PendingScheme = "platform-pending:"

// MaxUploadBytes is the platform's per-file cap (pendinguploads.MaxFileBytes).
const MaxUploadBytes = 25 << 20

// ParsePendingURI splits platform-pending:<ws>/<file_id>. Both parts must
// be UUIDs, so no path trick ("..", "/", "%2F") can reach another route.
func ParsePendingURI(uri string) (workspaceID, fileID string, err error) {
	rest, ok := strings.CutPrefix(uri, PendingScheme)
	ws, fid, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !isCanonicalUUID(ws) || !isCanonicalUUID(fid) {
		return "", "", fmt.Errorf("%w: %s is not platform-pending:<workspace uuid>/<file uuid>", ErrInvalidArgument, quoteCut(uri))
	}
	return ws, fid, nil
}

// isCanonicalUUID accepts only the 36-character hyphenated hex form.
func isCanonicalUUID(s string) bool { return uuid.Valid(s) }

// Upload is a staged upload's content, open for reading. Close it.
type Upload struct {
	Body     io.ReadCloser
	MimeType string
	// Size is the platform's Content-Length (-1 when it sent none).
	Size int64
	// Disposition is the platform's Content-Disposition (the file name).
	Disposition string
}

// FetchUpload opens a staged upload of this workspace. The body fails with
// ErrResponseTooLarge past max bytes (at most MaxUploadBytes). A 404 (no
// such file, expired after 24 h, or already acked) matches ErrNotFound.
func (c *Client) FetchUpload(ctx context.Context, fileID string, max int64) (*Upload, error) {
	if !isCanonicalUUID(fileID) {
		return nil, fmt.Errorf("%w: file id %s is not a UUID", ErrInvalidArgument, quoteCut(fileID))
	}
	if max <= 0 || max > MaxUploadBytes {
		max = MaxUploadBytes
	}
	r := request{method: http.MethodGet, path: c.selfPath("/pending-uploads/" + fileID + "/content"), accept: "*/*", noTimeout: true}
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, r, err)
	}
	c.recordRateLimit(resp.Header)
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := readBounded(resp.Body, maxErrorBody)
		return nil, c.apiError(r, &response{status: resp.StatusCode, header: resp.Header, body: body})
	}
	if resp.ContentLength > max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: upload %s is %d bytes, cap %d", ErrResponseTooLarge, fileID, resp.ContentLength, max)
	}
	return &Upload{
		Body:        &uploadBody{ReadCloser: resp.Body, max: max, id: fileID},
		MimeType:    resp.Header.Get("Content-Type"),
		Size:        resp.ContentLength,
		Disposition: resp.Header.Get("Content-Disposition"),
	}, nil
}

// uploadBody fails once more than max bytes were read.
type uploadBody struct {
	io.ReadCloser
	n, max int64
	id     string
}

func (b *uploadBody) Read(p []byte) (int, error) {
	if rem := b.max + 1 - b.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		return n - int(b.n-b.max), fmt.Errorf("%w: upload %s exceeds %d bytes", ErrResponseTooLarge, b.id, b.max)
	}
	return n, err
}

// AckUpload tells the platform the upload was handed off; after it the
// content is gone (GET answers 404) and a second ack answers 404 too.
func (c *Client) AckUpload(ctx context.Context, fileID string) error {
	if !isCanonicalUUID(fileID) {
		return fmt.Errorf("%w: file id %s is not a UUID", ErrInvalidArgument, quoteCut(fileID))
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: c.selfPath("/pending-uploads/" + fileID + "/ack")})
	return err
}
