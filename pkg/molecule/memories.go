package molecule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Memory scopes of the platform's agent memories (HMA).
const (
	MemoryLocal  = "LOCAL"
	MemoryTeam   = "TEAM"
	MemoryGlobal = "GLOBAL"
)

// Memory is one agent memory the platform returned (GET
// /workspaces/:id/memories). Raw holds the whole row.
type Memory struct {
	ID          string          `json:"id"`
	WorkspaceID string          `json:"workspace_id,omitempty"`
	Content     string          `json:"content"`
	Scope       string          `json:"scope"`
	Namespace   string          `json:"namespace,omitempty"`
	CreatedAt   string          `json:"created_at,omitempty"`
	Raw         json.RawMessage `json:"-"`
}

// CommittedMemory is the platform's answer to a commit: 201 {id, scope,
// namespace}.
type CommittedMemory struct {
	ID        string `json:"id"`
	Scope     string `json:"scope"`
	Namespace string `json:"namespace"`
}

// CommitMemory stores content in the workspace's agent memories (POST
// /workspaces/:self/memories; Molecule-AI/molecule-core and
// EnterOS-AI/enteros-core, workspace-server/internal/handlers/memories.go
// Commit). scope is LOCAL, TEAM or GLOBAL; if empty, LOCAL. The platform
// scrubs secrets from the content and lets only root workspaces write
// GLOBAL. It is never retried: the platform keeps no idempotency key.
func (c *Client) CommitMemory(ctx context.Context, content, scope string) (*CommittedMemory, error) {
	scope = strings.ToUpper(strings.TrimSpace(scope))
	if scope == "" {
		scope = MemoryLocal
	}
	switch {
	case strings.TrimSpace(content) == "":
		return nil, fmt.Errorf("%w: memory content is required", ErrInvalidArgument)
	case scope != MemoryLocal && scope != MemoryTeam && scope != MemoryGlobal:
		return nil, fmt.Errorf("%w: memory scope %q is not LOCAL, TEAM or GLOBAL", ErrInvalidArgument, scope)
	}
	r := request{method: http.MethodPost, path: c.selfPath("/memories"),
		body: map[string]string{"content": content, "scope": scope, "workspace_id": c.cfg.WorkspaceID}}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var out CommittedMemory
	if err := decodeJSON(r, resp.body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RecallMemory searches the memories the workspace may read (GET
// /workspaces/:self/memories?q=&scope=): q empty returns them all (the
// platform caps a page at 50), scope empty every scope. The 2026-08
// platform's plugin-backed search ignores q and scope
// (enteros-core aeec8e47 handlers/memories.go:346-395), so the rows are
// filtered here as the older platform filtered them: a case-insensitive
// substring of the content, and the scope. Without a memory plugin the
// error matches ErrMemoryNotConfigured.
func (c *Client) RecallMemory(ctx context.Context, q, scope string) ([]Memory, error) {
	query := url.Values{"workspace_id": {c.cfg.WorkspaceID}}
	if q != "" {
		query.Set("q", q)
	}
	scope = strings.ToUpper(strings.TrimSpace(scope))
	if scope != "" {
		query.Set("scope", scope)
	}
	r := request{method: http.MethodGet, path: c.selfPath("/memories"), query: query}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var raws []json.RawMessage
	if err := decodeJSON(r, resp.body, &raws); err != nil {
		return nil, err
	}
	out := make([]Memory, 0, len(raws))
	for _, raw := range raws {
		var m Memory
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("molecule: memory row: %w", err)
		}
		m.Raw = raw
		if (scope == "" || m.Scope == scope) && strings.Contains(strings.ToLower(m.Content), strings.ToLower(q)) {
			out = append(out, m)
		}
	}
	return out, nil
}
