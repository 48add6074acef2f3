package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// applyWorkspacesFile reads MOLECULE_WORKSPACES_FILE into
// MOLECULE_WORKSPACES_JSON. A variable holds at most 128 KiB on Linux
// (MAX_ARG_STRLEN), about 3,000 workspaces in MOLECULE_WORKSPACE_IDS; a
// file holds any number. An entry may name its token by "token_file"
// instead of holding it; a file that holds a token itself must be
// readable by its owner only, as a token file is.
func applyWorkspacesFile(m map[string]string) error {
	const name = "MOLECULE_WORKSPACES_FILE"
	path := strings.TrimSpace(m[name])
	if path == "" {
		return nil
	}
	if strings.TrimSpace(m["MOLECULE_WORKSPACES_JSON"]) != "" {
		return invalid(name, "and MOLECULE_WORKSPACES_JSON are both set; keep one of them")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return invalid(name, "%v", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return invalid(name, "%v", err)
	}
	var entries []map[string]any
	if err := json.Unmarshal(raw, &entries); err != nil {
		return invalid(name, "%s is not a JSON array of {\"id\", \"token\" or \"token_file\", \"platform_url\"} objects: %v", path, err)
	}
	holdsTokens := false
	for _, e := range entries {
		_, a := e["token"]
		_, b := e["workspace_token"]
		holdsTokens = holdsTokens || a || b
	}
	if perm := fi.Mode().Perm(); holdsTokens && perm&0o077 != 0 {
		return invalid(name, "%s holds tokens and has mode %04o; it must be readable by its owner only: chmod 600 %s (or name each token by \"token_file\")", path, perm, path)
	}
	m["MOLECULE_WORKSPACES_JSON"] = string(raw)
	return nil
}

// tokenFrom is an entry's token, read from its token_file when it holds
// none.
func (t channelTarget) tokenFrom() (string, error) {
	if tok := t.token(); tok != "" || t.TokenFile == "" {
		return tok, nil
	}
	tok, err := ReadTokenFile(t.TokenFile)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	return tok, nil
}
