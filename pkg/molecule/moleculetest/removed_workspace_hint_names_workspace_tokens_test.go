package moleculetest_test

import (
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// From 2026-08 the unauthenticated GET /workspaces/:id of a removed
// workspace (410) hints at the canvas's Settings → Workspace Tokens
// (enteros-core aeec8e47 handlers/workspace.go:1824); 2026-05 hinted at
// the Tokens tab (eaf7dbb7 handlers/workspace.go:695). molecule-relay
// doctor prints the hint.
func TestRemovedWorkspaceHintNamesWorkspaceTokens(t *testing.T) {
	for gen, want := range map[moleculetest.Generation]string{
		moleculetest.Gen2026_05: "Regenerate workspace + token from the canvas → Tokens tab",
		moleculetest.Gen2026_08: "Create a replacement workspace in Canvas, then open Settings → Workspace Tokens → + New Token",
	} {
		s := newServer(t, moleculetest.WithGeneration(gen))
		a := s.CreateWorkspace("a")
		s.Delete(a.ID)
		r := call(t, s, "GET", "/workspaces/"+a.ID, nil, "")
		if m := r.json(t); r.status != 410 || m["hint"] != want {
			t.Errorf("%v: %d %s; want 410 with hint %q", gen, r.status, r.body, want)
		}
	}
}
