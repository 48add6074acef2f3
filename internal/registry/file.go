package registry

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// fileEntry is one entry of an import file: MOLECULE_WORKSPACES_JSON's
// shape, with the token inline or by reference to a file (token_file,
// relative to the import file's directory).
type fileEntry struct {
	ID               string `json:"id"`
	WorkspaceID      string `json:"workspace_id"`
	Token            string `json:"token"`
	WorkspaceToken   string `json:"workspace_token"`
	TokenFile        string `json:"token_file"`
	PlatformURL      string `json:"platform_url"`
	PlatformURLCamel string `json:"platformUrl"`
	OrgID            string `json:"org_id"`
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ReadFile reads an import file: a JSON array of workspaces. The file must
// be readable by its owner only (it may hold tokens), as must every
// token_file it names. An entry without a platform URL gets platformURL.
func ReadFile(path, platformURL string) ([]Entry, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: import file: %w", ErrInvalid, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: import file %s has mode %04o; it may hold tokens and must be readable by its owner only: chmod 600 %s", ErrInvalid, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: import file: %w", ErrInvalid, err)
	}
	var list []fileEntry
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%w: import file %s is not a JSON array of workspaces ([{\"id\":…,\"token_file\":…,\"platform_url\":…}]): %w", ErrInvalid, path, err)
	}
	out := make([]Entry, 0, len(list))
	seen := map[string]bool{}
	for i, f := range list {
		e := Entry{ID: strings.TrimSpace(firstOf(f.ID, f.WorkspaceID)), Token: strings.TrimSpace(firstOf(f.Token, f.WorkspaceToken)),
			PlatformURL: strings.TrimSpace(firstOf(firstOf(f.PlatformURL, f.PlatformURLCamel), platformURL)), OrgID: f.OrgID}
		if e.Token == "" && f.TokenFile != "" {
			tf := f.TokenFile
			if !filepath.IsAbs(tf) {
				tf = filepath.Join(filepath.Dir(path), tf)
			}
			if e.Token, err = config.ReadTokenFile(tf); err != nil {
				return nil, fmt.Errorf("%w: import file %s, entry %d: %w", ErrInvalid, path, i+1, err)
			}
		}
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("import file %s, entry %d: %w", path, i+1, err)
		}
		if seen[e.ID] {
			return nil, fmt.Errorf("%w: import file %s: workspace %s is listed twice", ErrInvalid, path, e.ID)
		}
		seen[e.ID] = true
		out = append(out, e)
	}
	return out, nil
}

// FromConfig returns the statically configured workspaces
// (MOLECULE_WORKSPACE_IDS and the rest) as entries, to seed the registry.
func FromConfig(cfg *config.Config) []Entry {
	var out []Entry
	for _, w := range cfg.Workspaces() {
		out = append(out, Entry{ID: w.ID, Token: w.Token, PlatformURL: w.PlatformURL, OrgID: w.OrgID})
	}
	return out
}
