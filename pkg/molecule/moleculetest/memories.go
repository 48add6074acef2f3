package moleculetest

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/uuid"
)

// memoryRow is one agent memory (the platform's agent_memories table).
type memoryRow struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	Content     string `json:"content"`
	Scope       string `json:"scope"`
	Namespace   string `json:"namespace"`
	CreatedAt   string `json:"created_at"`
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
func (s *Server) handleMemories(w http.ResponseWriter, r *http.Request, id string, body []byte) {
	m := &s.mems
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
		row := memoryRow{ID: uuid.New(), WorkspaceID: id, Content: req.Content, Scope: req.Scope, Namespace: req.Namespace,
			CreatedAt: time.Now().UTC().Format(time.RFC3339Nano)}
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
