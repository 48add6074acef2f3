package moleculetest

// POST /workspaces/:id/chat/uploads and GET /workspaces/:id/chat/download,
// as enteros-core aeec8e47 workspace-server/internal/handlers/chat_files.go
// serves them (router.go 1011). Upload to a poll-mode workspace stages
// each file as a pending upload (uploadPollMode, 638-826) and answers
// {"files":[{uri,name,mimeType,size}]}; a push-mode workspace's upload
// and every download are forwarded to the workspace's own URL, which a
// poll-mode workspace has none of: 422 (resolveWorkspaceForwardCreds 224-231).

import (
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// uploadRequestCap is the multipart body's cap (chat_files.go 162,
// uploads/limits.go 98: 100 MB at aeec8e47; 50 MiB at eaf7dbb
// chat_files.go 113).
func (s *Server) uploadRequestCap() int64 {
	if s.gen >= Gen2026_08 {
		return 100 << 20
	}
	return 50 << 20
}

// uploadFileCap is pendinguploads.MaxFileBytes (storage.go 70: 100 MB at
// aeec8e47; 25 MiB at eaf7dbb storage.go 47).
func (s *Server) uploadFileCap() int64 {
	if s.gen >= Gen2026_08 {
		return 100 << 20
	}
	return 25 << 20
}

// isChatUploadPath says the request's body is read by the upload handler
// itself, up to its own cap, not by serveHTTP's maxBody.
func isChatUploadPath(p string) bool {
	return strings.HasSuffix(strings.TrimRight(p, "/"), "/chat/uploads")
}

// unsafeFilenameChars and sanitizeFilename are SanitizeFilename
// (chat_files.go 582-602).
var unsafeFilenameChars = regexp.MustCompile(`[^a-zA-Z0-9._\-]`)

func sanitizeFilename(name string) string {
	base := path.Base(strings.ReplaceAll(name, `\`, "/"))
	base = strings.ReplaceAll(base, " ", "_")
	base = unsafeFilenameChars.ReplaceAllString(base, "_")
	if len(base) > 100 {
		ext := ""
		if dot := strings.LastIndex(base, "."); dot >= 0 && len(base)-dot <= 16 {
			ext = base[dot:]
		}
		base = base[:100-len(ext)] + ext
	}
	if base == "" || base == "." || base == ".." || base == "/" {
		return "file"
	}
	return base
}

// safeMimetype is chat_files.go 840-863: parameters cut, anything not
// type/subtype becomes application/octet-stream, empty stays empty.
func safeMimetype(raw string) string {
	raw, _, _ = strings.Cut(raw, ";")
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	for _, r := range raw {
		if r < 0x21 || r > 0x7e {
			return "application/octet-stream"
		}
	}
	if p := strings.Split(raw, "/"); len(p) != 2 || p[0] == "" || p[1] == "" {
		return "application/octet-stream"
	}
	return raw
}

// handleChatUpload: the body is capped (MaxBytesReader, 352), a body past
// the cap fails the multipart parse (400, 650), no "files" part is 400,
// more than 64 files 400, one file past the per-file cap 413 with its
// name, size and max (690-720), and nothing is staged unless all are.
func (s *Server) handleChatUpload(w http.ResponseWriter, r *http.Request, id string) {
	if s.deliveryModeOf(id) != "poll" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "workspace has no callback URL — upload requires push-mode + a public URL"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.uploadRequestCap())
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		writeError(w, http.StatusBadRequest, "malformed multipart body")
		return
	}
	defer r.MultipartForm.RemoveAll()
	headers := r.MultipartForm.File["files"]
	if len(headers) == 0 {
		writeError(w, http.StatusBadRequest, "no files field in request")
		return
	}
	if len(headers) > 64 {
		writeError(w, http.StatusBadRequest, "too many files (limit 64)")
		return
	}
	type staged struct {
		name, mime string
		content    []byte
	}
	all := make([]staged, 0, len(headers))
	for _, fh := range headers {
		content, err := readPart(fh, s.uploadFileCap())
		if err == errPartTooLarge {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": "file exceeds per-file cap", "filename": fh.Filename, "size": fh.Size, "max": s.uploadFileCap()})
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "could not read file part")
			return
		}
		all = append(all, staged{sanitizeFilename(fh.Filename), safeMimetype(fh.Header.Get("Content-Type")), content})
	}
	out := make([]map[string]any, 0, len(all))
	for _, f := range all {
		u := s.StageUpload(id, f.name, f.mime, f.content)
		out = append(out, map[string]any{"uri": u.URI, "name": u.Name, "mimeType": u.MimeType, "size": len(u.Content)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": out})
}

type partError string

func (e partError) Error() string { return string(e) }

const errPartTooLarge = partError("part too large")

func readPart(fh *multipart.FileHeader, max int64) ([]byte, error) {
	if fh.Size > max {
		return nil, errPartTooLarge
	}
	f, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		return nil, errPartTooLarge
	}
	return b, err
}

// allowedDownloadRoots is templates.go 30-36 (allowedRoots).
var allowedDownloadRoots = []string{"/configs", "/workspace", "/home", "/plugins", "/agent-home"}

// downloadPathError is containerDownloadPathError (chat_files.go 418-442).
func downloadPathError(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "path must be absolute"
	}
	rooted := false
	for _, root := range allowedDownloadRoots {
		if p == root || strings.HasPrefix(p, root+"/") {
			rooted = true
		}
	}
	if !rooted {
		return "path must be under /configs, /workspace, /home, or /plugins"
	}
	if path.Clean(p) != p || strings.Contains(p, "..") {
		return "invalid path"
	}
	return ""
}

// handleChatDownload is Download (chat_files.go 459-498): the path is
// checked first (400), then the workspace must have a callback URL: a
// poll-mode workspace has none (422); a push-mode one is forwarded to
// <url>/internal/file/read?path= with its inbound secret as the bearer, and
// the answer (status, Content-Type, -Length, -Disposition, body) streamed
// back (streamWorkspaceResponse, 508-533).
func (s *Server) handleChatDownload(w http.ResponseWriter, r *http.Request, id string) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "path query required")
		return
	}
	if msg := downloadPathError(p); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	s.mu.RLock()
	ws := s.workspaces[id]
	var wsURL, mode, secret string
	if ws != nil {
		wsURL, mode, secret = ws.url, ws.deliveryMode, ws.secret
	}
	s.mu.RUnlock()
	if wsURL == "" {
		if mode != "push" {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "workspace has no callback URL — download requires push-mode + a public URL"})
			return
		}
		writeError(w, http.StatusServiceUnavailable, "workspace url not registered yet")
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, strings.TrimRight(wsURL, "/")+"/internal/file/read?path="+url.QueryEscape(p), nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "failed to construct forward request")
		return
	}
	req.Header.Set("Authorization", "Bearer "+secret) // platform_inbound_secret (chat_files.go 494)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, "workspace unreachable")
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Disposition"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// deliveryModeOf is lookupUploadDeliveryMode (chat_files.go 549-567):
// an unset mode is push.
func (s *Server) deliveryModeOf(id string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ws := s.workspaces[id]; ws != nil && ws.deliveryMode != "" {
		return ws.deliveryMode
	}
	return "push"
}
