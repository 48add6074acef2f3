package moleculetest_test

import (
	"testing"
)

// GET /workspaces/:id answers agent_card null until an agent registers
// the workspace, and the card it registered with afterwards: the
// register's upsert sets it (enteros-core aeec8e47
// handlers/registry.go:1097-1144) and Get reads COALESCE(agent_card,
// 'null') (handlers/workspace.go:1769). molecule-relay doctor tells a
// never-registered workspace by it.
func TestAgentCardIsNullUntilRegistered(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("a")
	if m := call(t, s, "GET", "/workspaces/"+a.ID, nil, "").json(t); m["agent_card"] != nil {
		t.Fatalf("agent_card before register: %v, want null", m["agent_card"])
	}
	registerPoll(t, s, a)
	if m := call(t, s, "GET", "/workspaces/"+a.ID, nil, "").json(t); m["agent_card"] == nil {
		t.Fatal("agent_card after register: null, want the registered card")
	}
}
