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
	if !ok || !ok2 || !uuid.Valid(ws) || !uuid.Valid(fid) {
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
// ErrResponseTooLarge past max bytes (at most MaxUploadBytes). A 404 (no
// such file, expired after 24 h, or already acked) matches ErrNotFound.
func (c *Client) FetchUpload(ctx context.Context, fileID string, max int64) (*Upload, error) {
	if !uuid.Valid(fileID) {
		return nil, fmt.Errorf("%w: file id %s is not a UUID", ErrInvalidArgument, quoteCut(fileID))
	}
	if max <= 0 || max > MaxUploadBytes {
		max = MaxUploadBytes
	}
	r := request{method: http.MethodGet, path: c.selfPath("/pending-uploads/" + fileID + "/content"), accept: "*/*", noTimeout: true}
	resp, err := c.openStream(ctx, c.hc, r, maxErrorBody)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: upload %s is %d bytes, cap %d", ErrResponseTooLarge, fileID, resp.ContentLength, max)
	}
	capped := &cappedReader{r: resp.Body, max: max, err: fmt.Errorf("%w: upload %s exceeds %d bytes", ErrResponseTooLarge, fileID, max)}
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
	if !uuid.Valid(fileID) {
		return fmt.Errorf("%w: file id %s is not a UUID", ErrInvalidArgument, quoteCut(fileID))
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: c.selfPath("/pending-uploads/" + fileID + "/ack")})
	return err
}
