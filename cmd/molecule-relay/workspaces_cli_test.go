package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// TestWorkspacesCommandChangesTheRegistry: add, import, pause, resume,
// list, rotate-key and remove through the CLI, with exit 0; bad usage and
// unsafe files exit 2 naming what to do; a token appears in no output.
func TestWorkspacesCommandChangesTheRegistry(t *testing.T) {
	const (
		wsA  = "11111111-1111-4111-8111-111111111111"
		wsB  = "22222222-2222-4222-8222-222222222222"
		tokA = "tok-cli-AAAA-0123456789"
		tokB = "tok-cli-BBBB-9876543210"
	)
	ns := natstest.Start(t)
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, k1, _ := registry.NewKey()
	_, k2, _ := registry.NewKey()
	key1, key2 := write("k1", k1, 0o600), write("k2", k2, 0o600)
	env := []string{"NATS_URL=" + ns.ClientURL(), "MOLECULE_REGISTRY_KEY_FILE=" + key1, "MOLECULE_PLATFORM_URL=http://plat.example"}
	tokFile := write("a.token", tokA, 0o600)
	imp := write("ws.json", `[{"id":"`+wsB+`","token":"`+tokB+`"}]`, 0o600)
	loose := write("loose.json", `[]`, 0o644)

	var all string
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(t, env, args...)
		all += r.stdout + r.stderr
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	ok("workspaces", "add", wsA, "--token-file", tokFile)
	ok("workspaces", "import", imp)
	ok("workspaces", "pause", wsB)
	out := ok("workspaces", "list")
	if !strings.Contains(out, wsA) || !strings.Contains(out, "paused") {
		t.Fatalf("list:\n%s", out)
	}
	ok("workspaces", "resume", wsB)
	ok("workspaces", "rotate-key", "--new-key-file", key2)
	env[1] = "MOLECULE_REGISTRY_KEY_FILE=" + key2
	var list []registry.Entry
	if err := json.Unmarshal([]byte(ok("workspaces", "list", "--json")), &list); err != nil || len(list) != 2 || list[1].Paused {
		t.Fatalf("list --json after rotation: %v %v", list, err)
	}
	ok("workspaces", "remove", wsA)
	if strings.Contains(all, tokA) || strings.Contains(all, tokB) {
		t.Fatal("a token was printed")
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"workspaces", "frobnicate"}, 2, "unknown workspaces subcommand"},
		{[]string{"workspaces", "add"}, 2, "usage: workspaces add"},
		{[]string{"workspaces", "add", wsA}, 2, "--token-file is required"},
		{[]string{"workspaces", "import", loose}, 2, "chmod 600"},
		{[]string{"workspaces", "rotate-key"}, 2, "--new-key-file is required"},
		{[]string{"workspaces", "remove", wsA}, 1, "not in the registry"},
	} {
		r := runCLI(t, env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	r := runCLI(t, []string{"NATS_URL=" + ns.ClientURL()}, "workspaces", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "MOLECULE_REGISTRY_KEY_FILE") {
		t.Errorf("no key: exit %d %q", r.code, r.stderr)
	}
	// Two key sources are bad configuration; a Secrets Manager key whose
	// extension does not answer (nothing listens on the port: no Lambda
	// here) is a runtime failure.
	r = runCLI(t, append(env, "MOLECULE_REGISTRY_KEY="+k1), "workspaces", "list")
	if r.code != 2 || !strings.Contains(r.stderr, "MOLECULE_REGISTRY_KEY") || !strings.Contains(r.stderr, "exactly one") {
		t.Errorf("two key sources: exit %d %q", r.code, r.stderr)
	}
	r = runCLI(t, []string{"NATS_URL=" + ns.ClientURL(), "MOLECULE_REGISTRY_KEY_SECRET=molecule/registry-key", "AWS_SESSION_TOKEN=session",
		"PARAMETERS_SECRETS_EXTENSION_HTTP_PORT=" + closedPort(t)}, "workspaces", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "MOLECULE_REGISTRY_KEY_SECRET") || !strings.Contains(r.stderr, "not reachable") {
		t.Errorf("Secrets Manager key, no extension: exit %d %q", r.code, r.stderr)
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	return port
}
