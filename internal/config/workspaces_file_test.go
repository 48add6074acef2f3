package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// Ten thousand workspaces (about 370 KB of ids) do not fit in one
// variable (MAX_ARG_STRLEN, 128 KiB): MOLECULE_WORKSPACES_FILE holds them,
// in MOLECULE_WORKSPACES_JSON's shape.
func TestTenThousandWorkspacesFromAFile(t *testing.T) {
	const n = 10000
	entries := make([]map[string]string, n)
	for i := range entries {
		entries[i] = map[string]string{"id": fmt.Sprintf("b48f61e0-0000-4000-8000-%012d", i), "token": fmt.Sprintf("tok-%d", i)}
	}
	p := writeJSON(t, entries, 0o600)
	cfg, err := load(t, nil, "MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACES_FILE="+p)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil {
		t.Fatal(err)
	}
	ws := cfg.Workspaces()
	if len(ws) != n || ws[n-1].ID != entries[n-1]["id"] || ws[n-1].Token != "tok-9999" {
		t.Fatalf("%d workspaces, last %+v", len(ws), ws[len(ws)-1].ID)
	}
}

// A file that holds tokens is refused unless only its owner can read it,
// naming the variable, the file and the chmod; one that names each token
// by its token_file (itself 0600) may be readable by others.
func TestWorkspacesFileWithTokensMustBeMode0600(t *testing.T) {
	base := "MOLECULE_PLATFORM_URL=http://127.0.0.1:9"
	p := writeJSON(t, []map[string]string{{"id": wsA, "token": tokA}}, 0o644)
	_, err := load(t, nil, base, "MOLECULE_WORKSPACES_FILE="+p)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_WORKSPACES_FILE") || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Errorf("a 0644 file with tokens: %v", err)
	}
	if strings.Contains(fmt.Sprint(err), tokA) {
		t.Errorf("the error echoes the token: %v", err)
	}

	tokFile := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tokFile, []byte(tokA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p = writeJSON(t, []map[string]string{{"id": wsA, "token_file": tokFile}}, 0o644)
	cfg, err := load(t, nil, base, "MOLECULE_WORKSPACES_FILE="+p)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil || cfg.Workspaces()[0].Token != tokA {
		t.Errorf("a 0644 file naming a 0600 token_file: %v", err)
	}

	if err := os.Chmod(tokFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := load(t, nil, base, "MOLECULE_WORKSPACES_FILE="+p); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "chmod 600 "+tokFile) {
		t.Errorf("a token_file of mode 0644: %v", err)
	}
}

// Bad files are refused naming the variable: missing, not JSON, and set
// together with MOLECULE_WORKSPACES_JSON.
func TestWorkspacesFileRefusals(t *testing.T) {
	base := "MOLECULE_PLATFORM_URL=http://127.0.0.1:9"
	notJSON := filepath.Join(t.TempDir(), "ws.json")
	if err := os.WriteFile(notJSON, []byte("id,token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := writeJSON(t, []map[string]string{{"id": wsA, "token": tokA}}, 0o600)
	for name, environ := range map[string][]string{
		"missing":   {base, "MOLECULE_WORKSPACES_FILE=" + filepath.Join(t.TempDir(), "none.json")},
		"not JSON":  {base, "MOLECULE_WORKSPACES_FILE=" + notJSON},
		"with JSON": {base, "MOLECULE_WORKSPACES_FILE=" + good, `MOLECULE_WORKSPACES_JSON=[{"id":"` + wsA + `","token":"t"}]`},
	} {
		if _, err := load(t, nil, environ...); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_WORKSPACES_FILE") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func writeJSON(t *testing.T, v any, mode os.FileMode) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "workspaces.json")
	if err := os.WriteFile(p, raw, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}
