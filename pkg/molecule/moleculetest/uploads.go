package moleculetest

// Staged chat uploads of a NEW poll-mode workspace, as the platform keeps
// them (enteros-core workspace-server/internal/handlers/pending_uploads.go
// and internal/pendinguploads/storage.go; docs/protocol.md "Staged
// uploads"): staging logs a chat_upload_receive manifest row; GET
// .../pending-uploads/:file_id/content serves the bytes with
// the stored mimetype, POST .../ack marks the row handed off, after which
// both answer 404.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// Upload is one staged upload.
type Upload struct {
	FileID, WorkspaceID string
	Name, MimeType      string
	Content             []byte
	// URI is platform-pending:<ws>/<file_id>, what a message's file part names.
	URI     string
	Fetches int
	Acked   bool
	// Expired is set by ExpireUpload: past the 24 h expires_at, every
	// generation answers 404.
	Expired bool
}

type uploadStore struct {
	mu   sync.Mutex
	byID map[string]*Upload
}

// StageUpload stages content for workspace ws as a canvas upload to a
// poll-mode workspace does, and returns it; send a message whose file part
// names its URI to deliver it.
func (s *Server) StageUpload(ws, name, mimeType string, content []byte) Upload {
	u := &Upload{FileID: newUUID(), WorkspaceID: ws, Name: name, MimeType: mimeType, Content: append([]byte(nil), content...)}
	u.URI = "platform-pending:" + ws + "/" + u.FileID
	s.uploads.mu.Lock()
	if s.uploads.byID == nil {
		s.uploads.byID = map[string]*Upload{}
	}
	s.uploads.byID[u.FileID] = u
	s.uploads.mu.Unlock()
	s.uploadManifestRow(*u)
	return *u
}

// uploadManifestRow logs the chat_upload_receive row the platform writes
// with each staged file (handlers/chat_files.go uploadPollMode).
func (s *Server) uploadManifestRow(u Upload) {
	f := s.feedOf(u.WorkspaceID)
	if f == nil {
		return
	}
	manifest, _ := json.Marshal(map[string]any{"file_id": u.FileID, "name": u.Name, "mimeType": u.MimeType, "size": len(u.Content), "uri": u.URI})
	rw := &row{id: newUUID(), workspaceID: u.WorkspaceID, activityType: "a2a_receive", targetID: u.WorkspaceID,
		method: "chat_upload_receive", summary: "chat_upload_receive: " + u.Name, requestBody: manifest, status: "ok"}
	f.commit(rw, s.encodeRow)
	s.publish(u.WorkspaceID, "ACTIVITY_LOGGED", s.activityEvent(rw))
}

// StagedUpload returns the upload's current state (fetch count, acked).
func (s *Server) StagedUpload(fileID string) (Upload, bool) {
	s.uploads.mu.Lock()
	defer s.uploads.mu.Unlock()
	u, ok := s.uploads.byID[fileID]
	if !ok {
		return Upload{}, false
	}
	return *u, true
}

// ExpireUpload moves the upload past its expires_at (created_at + 24 h,
// pendinguploads/storage.go 26): content and ack answer 404.
func (s *Server) ExpireUpload(fileID string) {
	s.uploads.mu.Lock()
	if u := s.uploads.byID[fileID]; u != nil {
		u.Expired = true
	}
	s.uploads.mu.Unlock()
}

// lookupUpload is storage.Get then the handler's workspace check: an
// unknown, acked or other workspace's row is 404 alike. Holds mu on true.
func (s *Server) lookupUpload(w http.ResponseWriter, id, fileID string) (*Upload, bool) {
	if !isUUID(fileID) {
		writeError(w, http.StatusBadRequest, "invalid file_id")
		return nil, false
	}
	s.uploads.mu.Lock()
	u := s.uploads.byID[fileID]
	if u == nil || u.Expired || u.Acked && s.gen < Gen2026_08 {
		s.uploads.mu.Unlock()
		writeError(w, http.StatusNotFound, "pending upload not found, expired, or already acked")
		return nil, false
	}
	if u.WorkspaceID != id {
		s.uploads.mu.Unlock()
		writeError(w, http.StatusNotFound, "pending upload not found")
		return nil, false
	}
	return u, true
}

func (s *Server) handleUploadContent(w http.ResponseWriter, id, fileID string) {
	u, ok := s.lookupUpload(w, id, fileID)
	if !ok {
		return
	}
	u.Fetches++
	content, mime, name := u.Content, u.MimeType, u.Name
	s.uploads.mu.Unlock()
	if mime == "" {
		mime = "application/octet-stream"
	}
	w.Header().Set("Content-Type", mime)
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	w.Header().Set("Content-Length", strconv.Itoa(len(content)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(content)
}

// handleUploadAck: the handler looks the row up before acking; at eaf7dbb
// the lookup skips acked rows, so a repeated ack is 404; at aeec8e47 it
// finds them and the storage's ack is idempotent: 200.
func (s *Server) handleUploadAck(w http.ResponseWriter, id, fileID string) {
	u, ok := s.lookupUpload(w, id, fileID)
	if !ok {
		return
	}
	u.Acked = true
	s.uploads.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]bool{"acked": true})
}

// isUploadRoute matches pending-uploads/:file_id/content (GET) and /ack (POST).
func isUploadRoute(rest []string, m string) bool {
	return len(rest) == 3 && rest[0] == "pending-uploads" &&
		(rest[2] == "content" && m == http.MethodGet || rest[2] == "ack" && m == http.MethodPost)
}
