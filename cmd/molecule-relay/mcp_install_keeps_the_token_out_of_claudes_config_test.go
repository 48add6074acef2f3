package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// mcp install (scope project) writes the project's .mcp.json with what
// mcp needs and keeps the other servers there; the token is not in it but
// in a mode-0600 file named by MOLECULE_WORKSPACE_TOKEN_FILE, and the
// command is an absolute path (Claude Code need not find it on PATH).
func TestMCPInstallKeepsTheTokenOutOfClaudesConfig(t *testing.T) {
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("claude")
	home, proj := t.TempDir(), t.TempDir()
	t.Chdir(proj)
	if err := os.WriteFile(".mcp.json", []byte(`{"mcpServers":{"other":{"type":"stdio","command":"x"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	environ := []string{"HOME=" + home, "MOLECULE_PLATFORM_URL=" + plat.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token}
	for range 2 { // a second install replaces the first
		r := runCLI(t, environ, "mcp", "install", "--scope", "project")
		if r.code != exitOK {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		t.Logf("%s", r.stdout)
	}
	raw, err := os.ReadFile(".mcp.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), ws.Token) {
		t.Fatalf(".mcp.json holds the token:\n%s", raw)
	}
	var doc struct {
		MCPServers map[string]mcpServer `json:"mcpServers"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	srv, ok := doc.MCPServers["molecule"]
	if !ok || doc.MCPServers["other"].Command != "x" {
		t.Fatalf("servers %+v; want molecule added beside other", doc.MCPServers)
	}
	if !filepath.IsAbs(srv.Command) || len(srv.Args) != 1 || srv.Args[0] != "mcp" {
		t.Errorf("command %q %v; want an absolute path and mcp", srv.Command, srv.Args)
	}
	tokenFile := filepath.Join(home, ".claude", "channels", "molecule", ws.ID+".token")
	want := map[string]string{"MOLECULE_PLATFORM_URL": plat.URL(), "MOLECULE_WORKSPACE_ID": ws.ID, "MOLECULE_WORKSPACE_TOKEN_FILE": tokenFile}
	if len(srv.Env) != len(want) {
		t.Errorf("env %v; want %v", srv.Env, want)
	}
	for k, v := range want {
		if srv.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, srv.Env[k], v)
		}
	}
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(tokenFile); strings.TrimSpace(string(b)) != ws.Token {
		t.Error("the token file does not hold the token")
	}
}

// Several workspaces are refused with where to put them instead; no
// workspace at all names the variables to set. Both exit 2.
func TestMCPInstallRefusesWhatItCannotWrite(t *testing.T) {
	t.Chdir(t.TempDir())
	home := t.TempDir()
	for _, tc := range []struct {
		environ []string
		want    string
	}{
		{[]string{"HOME=" + home}, "MOLECULE_WORKSPACE_ID"},
		{[]string{"HOME=" + home, "MOLECULE_PLATFORM_URL=http://127.0.0.1:1", "MOLECULE_WORKSPACE_IDS=6f1c2b1e-4a57-4c47-9a3e-3c1f2d9b8a01", "MOLECULE_WORKSPACE_TOKENS=t"}, "writes one workspace"},
	} {
		r := runCLI(t, tc.environ, "mcp", "install", "--scope", "project")
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", tc.environ, r.code, r.stderr, tc.want)
		}
	}
	if _, err := os.Stat(".mcp.json"); err == nil {
		t.Error("a refused install wrote .mcp.json")
	}
}
