package moleculetest

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// memoryRow is one agent memory (the platform's agent_memories table).
type memoryRow struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	Content     string `json:"content"`
	Scope       string `json:"scope"`
	Namespace   string `json:"namespace"`
	CreatedAt   string `json:"created_at"`
	// secs is created_at to the second, as the v2 shim renders it.
	secs string
}

// memories is the double's agent memory store, by workspace.
type memories struct {
	mu   sync.Mutex
	rows []memoryRow
}

// handleMemories serves POST and GET /workspaces/:id/memories as the
// platform's MemoriesHandler does (workspace-server/internal/handlers/
// memories.go at molecule-core 7cf77f2): a commit needs content and a
// scope of LOCAL, TEAM or GLOBAL and answers 201 {id, scope, namespace};
// a search returns the workspace's rows (and GLOBAL ones), filtered by
// scope and by a case-insensitive substring q, newest first, at most 50.
// TEAM visibility across workspaces and semantic search are not modelled.
//
// On 2026-08 (enteros-core aeec8e47 handlers/memories.go:165-395) the v2
// memory plugin is the only backend: without it (WithoutMemoryPlugin) a
// valid commit and every search answer 503; with it a commit checks a
// namespace of at most 50 characters and GLOBAL from a root workspace
// only (403), and a search ignores q and scope and returns {id, content,
// scope, created_at} with created_at to the second (memv2Search).
func (s *Server) handleMemories(w http.ResponseWriter, r *http.Request, id string, body []byte) {
	m := &s.mems
	v2 := s.gen >= Gen2026_08
	if r.Method != http.MethodPost && v2 {
		s.memv2Search(w, id)
		return
	}
	if r.Method == http.MethodPost {
		var req struct {
			Content   string `json:"content"`
			Scope     string `json:"scope"`
			Namespace string `json:"namespace"`
		}
		if !bodyInto(body, &req) || req.Content == "" || req.Scope == "" {
			writeError(w, http.StatusBadRequest, "invalid request body")
			return
		}
		if req.Scope != "LOCAL" && req.Scope != "TEAM" && req.Scope != "GLOBAL" {
			writeError(w, http.StatusBadRequest, "scope must be LOCAL, TEAM, or GLOBAL")
			return
		}
		if req.Namespace == "" {
			req.Namespace = "general"
		}
		if v2 && !s.memv2Commit(w, id, req.Scope, req.Namespace) {
			return
		}
		row := memoryRow{ID: uuid.NewString(), WorkspaceID: id, Content: req.Content, Scope: req.Scope, Namespace: req.Namespace,
			CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), secs: nowSeconds()}
		m.mu.Lock()
		m.rows = append(m.rows, row)
		m.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]string{"id": row.ID, "scope": row.Scope, "namespace": row.Namespace})
		return
	}
	scope, q := r.URL.Query().Get("scope"), strings.ToLower(r.URL.Query().Get("q"))
	out := make([]memoryRow, 0)
	m.mu.Lock()
	for i := len(m.rows) - 1; i >= 0 && len(out) < 50; i-- {
		row := m.rows[i]
		mine := row.WorkspaceID == id || row.Scope == "GLOBAL"
		if mine && (scope == "" || row.Scope == scope) && (q == "" || strings.Contains(strings.ToLower(row.Content), q)) {
			out = append(out, row)
		}
	}
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// memoryPluginMissing is the 2026-08 answer without MEMORY_PLUGIN_URL
// (enteros-core aeec8e47 handlers/memories.go:221-226, 350-355).
const memoryPluginMissing = "memory plugin is not configured (set MEMORY_PLUGIN_URL)"

// memv2Commit applies the 2026-08 commit checks that the older table did
// not have, after the body and scope checks and before the write. It
// reports whether the write may go on.
func (s *Server) memv2Commit(w http.ResponseWriter, id, scope, namespace string) bool {
	if len(namespace) > 50 {
		writeError(w, http.StatusBadRequest, "namespace must be <= 50 characters")
		return false
	}
	if scope == "GLOBAL" {
		s.mu.RLock()
		ws := s.workspaces[id]
		child := ws != nil && ws.parentID != ""
		s.mu.RUnlock()
		if child {
			writeError(w, http.StatusForbidden, "only root workspaces can write GLOBAL memories")
			return false
		}
	}
	if s.noMemoryPlugin {
		writeError(w, http.StatusServiceUnavailable, memoryPluginMissing)
		return false
	}
	return true
}

// memv2Entry is the v2 shim's legacy row (handlers/memories.go:378-383).
type memv2Entry struct {
	ID        string `json:"id"`
	Content   string `json:"content"`
	Scope     string `json:"scope"`
	CreatedAt string `json:"created_at"`
}

// memv2Search is GET /memories on 2026-08: the plugin's 50 newest rows the
// workspace may read, whatever q and scope say.
func (s *Server) memv2Search(w http.ResponseWriter, id string) {
	if s.noMemoryPlugin {
		writeError(w, http.StatusServiceUnavailable, memoryPluginMissing)
		return
	}
	m := &s.mems
	out := make([]memv2Entry, 0)
	m.mu.Lock()
	for i := len(m.rows) - 1; i >= 0 && len(out) < 50; i-- {
		if row := m.rows[i]; row.WorkspaceID == id || row.Scope == "GLOBAL" {
			out = append(out, memv2Entry{ID: row.ID, Content: row.Content, Scope: row.Scope, CreatedAt: row.secs})
		}
	}
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}
