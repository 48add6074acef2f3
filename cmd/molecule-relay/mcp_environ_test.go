package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// molecule-relay mcp reads the TypeScript channel's setup: its .env file
// in MOLECULE_STATE_DIR (default ~/.claude/channels/molecule), with the
// environment winning; its default agent name; and one store per user in
// the state directory. Its other variables (MOLECULE_POLL_INTERVAL_MS, …)
// are the configuration's (internal/config TestTypeScriptChannelSettingsStandForTheRelays);
// MOLECULE_STATE_DIR is not handed on, so no other part warns of it.
func TestMCPReadsTheTypeScriptChannelsVariables(t *testing.T) {
	home := t.TempDir()
	state := filepath.Join(home, ".claude", "channels", "molecule")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	dotenv := "MOLECULE_PLATFORM_URL=https://from-dotenv.example\nMOLECULE_WORKSPACE_IDS=ws-1\n# a comment\nexport NOT_READ=1\nMOLECULE_POLL_INTERVAL_MS=750\n"
	if err := os.WriteFile(filepath.Join(state, ".env"), []byte(dotenv), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(env []string, k string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if kk, v, _ := strings.Cut(env[i], "="); kk == k {
				return v
			}
		}
		return ""
	}
	env, _ := mcpEnviron([]string{"HOME=" + home, "MOLECULE_WORKSPACE_IDS=ws-env"})
	for k, want := range map[string]string{
		"MOLECULE_PLATFORM_URL":     "https://from-dotenv.example",
		"MOLECULE_WORKSPACE_IDS":    "ws-env", // the environment wins
		"MOLECULE_POLL_INTERVAL_MS": "750",    // from .env, read by config.Load
		"MOLECULE_AGENT_NAME":       "Claude Code (channel)",
		"NATS_STORE_DIR":            filepath.Join(state, "nats"),
		"NOT_READ":                  "",
	} {
		if got := get(env, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	other := t.TempDir()
	env, _ = mcpEnviron([]string{"HOME=" + home, "MOLECULE_STATE_DIR=" + other, "MOLECULE_AGENT_NAME=mine",
		"MOLECULE_POLL_INTERVAL=2s", "MOLECULE_POLL_INTERVAL_MS=750", "NATS_STORE_DIR=/srv/nats"})
	for k, want := range map[string]string{
		"MOLECULE_PLATFORM_URL":  "", // no .env in that state directory
		"MOLECULE_AGENT_NAME":    "mine",
		"MOLECULE_POLL_INTERVAL": "2s",
		"NATS_STORE_DIR":         "/srv/nats",
		"MOLECULE_STATE_DIR":     "",
	} {
		if got := get(env, k); got != want {
			t.Errorf("with MOLECULE_STATE_DIR: %s = %q, want %q", k, got, want)
		}
	}
	if w := unknownVarWarnings(env); len(w) != 0 {
		t.Errorf("warnings for the channel's own variables: %q", w)
	}
}
