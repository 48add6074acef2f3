package agentapi

// GET /v1/files?uri=…: the bytes of one of the handled message's file
// parts: the attachment cache's copy when it holds one, else a
// platform-pending: upload of the message's own workspace or a workspace:
// file through /chat/download (docs/agentapi.md "Files"). This endpoint
// never acks; the cache acks what it holds (docs/files.md).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

var (
	// ErrNotAttachment: the URI is not a file part of this message (403).
	ErrNotAttachment = errors.New("agentapi: the uri is not an attachment of the message being handled; only its own file parts can be read")
	// ErrFileScheme: the relay cannot read this kind of URI (501).
	ErrFileScheme = errors.New("agentapi: the relay cannot read this attachment")
	// ErrFileGone: the platform no longer has the upload (404): it
	// expired (24 h after the upload) or was acked.
	ErrFileGone = errors.New("agentapi: the platform no longer has this upload (staged uploads expire 24 h after the upload, or it was acked)")
)

// File opens an attachment of the handled message (see openFile), capped
// at MaxFileBytes. It
// implements handler.Agent.File; close the body.
func (s *Session) File(ctx context.Context, uri string) (io.ReadCloser, string, error) {
	ctx, cancel, err := s.scoped(ctx)
	if err != nil {
		return nil, "", err
	}
	body, mime, err := s.openFile(ctx, uri)
	if err != nil {
		cancel()
		return nil, "", err
	}
	return &cancelOnClose{ReadCloser: body, cancel: cancel}, mime, nil
}

func (s *Session) openFile(ctx context.Context, uri string) (io.ReadCloser, string, error) {
	if !s.hasAttachment(uri) {
		return nil, "", ErrNotAttachment
	}
	if fc := s.srv.cfg.Files; fc != nil {
		if f, mime, ok := fc.Held(s.in.WorkspaceID, uri); ok {
			return f, mime, nil
		}
	}
	c, err := s.client()
	if err != nil {
		return nil, "", err
	}
	if p, ok := strings.CutPrefix(uri, molecule.WorkspaceScheme); ok {
		// A push-mode workspace's container file, which the platform reads
		// for us; for a poll-mode workspace it answers 422.
		up, err := c.DownloadWorkspaceFile(ctx, p, s.srv.cfg.MaxFileBytes)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrFileScheme, err)
		}
		return up.Body, up.MimeType, nil
	}
	if !strings.HasPrefix(uri, molecule.PendingScheme) {
		return nil, "", fmt.Errorf("%w: only %s uploads and %s files are fetched", ErrFileScheme, molecule.PendingScheme, molecule.WorkspaceScheme)
	}
	ws, fid, err := molecule.ParsePendingURI(uri)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if ws != s.in.WorkspaceID {
		return nil, "", fmt.Errorf("%w: the upload names workspace %s, not the message's", ErrNotAttachment, ws)
	}
	up, err := c.FetchUpload(ctx, fid, s.srv.cfg.MaxFileBytes)
	if errors.Is(err, molecule.ErrNotFound) {
		return nil, "", fmt.Errorf("%w: %v", ErrFileGone, err)
	}
	if err != nil {
		return nil, "", err
	}
	return up.Body, up.MimeType, nil
}

func (s *Session) hasAttachment(uri string) bool {
	for _, a := range s.in.Attachments {
		if uri != "" && a.URI == uri {
			return true
		}
	}
	return false
}

// cancelOnClose ends the call's context when the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, sess *Session) {
	body, mime, err := sess.File(r.Context(), r.URL.Query().Get("uri"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer body.Close()
	// Read the first chunk before the status so a failure there is still
	// an error answer; past it, a failure cuts the body short.
	buf := make([]byte, 32<<10)
	n, rerr := io.ReadFull(body, buf)
	if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
		writeError(w, rerr)
		return
	}
	w.Header().Set("Content-Type", mime)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if rerr != nil {
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf[:n])
	if rerr == nil {
		if _, err := io.Copy(w, body); err != nil {
			s.cfg.Logger.WarnContext(sess.base, "agentapi: file body cut short", "workspace", sess.in.WorkspaceID, "activity", sess.in.ActivityID, "error", err)
			panic(http.ErrAbortHandler) // the client sees a broken body, never a short "complete" one
		}
	}
}
