package main

import (
	"strings"
	"testing"
)

// The TypeScript channel's settings are read (config.ChannelSettings), so
// no warning calls them "not a setting". Before, MOLECULE_WORKSPACES_JSON,
// MOLECULE_AUTO_REGISTER_POLL, MOLECULE_HEARTBEAT_INTERVAL_MS and
// MOLECULE_POLL_WINDOW_SECS were warned as not a setting, and
// MOLECULE_POLL_INTERVAL_MS as ignored although mcp read it.
// MOLECULE_STATE_DIR is every command's (the base of the default store;
// mcp's state directory), so it is not warned either.
func TestTypeScriptChannelSettingsAreNotWarned(t *testing.T) {
	environ := []string{"MOLECULE_WORKSPACES_JSON=[]", "MOLECULE_AUTO_REGISTER_POLL=true", "MOLECULE_HEARTBEAT_INTERVAL_MS=30000",
		"MOLECULE_POLL_WINDOW_SECS=30", "MOLECULE_POLL_INTERVAL_MS=5000", "MOLECULE_PLATFORM_URLS=https://a.example",
		"MOLECULE_AGENT_NAME=x", "MOLECULE_AGENT_DESC=y"}
	if w := unknownVarWarnings(environ); len(w) != 0 {
		t.Fatalf("warnings: %q", w)
	}
	if w := unknownVarWarnings([]string{"MOLECULE_STATE_DIR=/tmp/x"}); len(w) != 0 {
		t.Fatalf("MOLECULE_STATE_DIR outside mcp: %q", w)
	}
	if w := unknownVarWarnings([]string{"MOLECULE_POLL_INTERVALL=5"}); len(w) != 1 || !strings.Contains(w[0], "did you mean MOLECULE_POLL_INTERVAL?") {
		t.Fatalf("a misspelling is still warned: %q", w)
	}
}
