package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// connect --once hands an exec: handler the variables MOLECULE_HANDLER_ENV
// names or whose prefix it gives, and never the workspace token, even
// under a prefix that matches it.
func TestHandlerEnvReachesExecHandlerWithoutToken(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("env-agent")
	nats := natstest.Start(t)
	prog := filepath.Join(t.TempDir(), "env.sh")
	writeScript(t, prog, "#!/bin/sh\ncat >/dev/null\nenv | sort | tr '\\n' ' '\n")
	environ := []string{"PATH=" + os.Getenv("PATH"),
		"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + nats.ClientURL(), "MOLECULE_HANDLER=exec:" + prog,
		"ANTHROPIC_API_KEY=sk-ant-test", "OPENAI_BASE_URL=http://127.0.0.1:11434/v1", "VIRTUAL_ENV=/opt/venv", "UNNAMED=x",
		"MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY,OPENAI_*,VIRTUAL_ENV,MOLECULE_WORKSPACE_*"}
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	if code, body, err := srv.SendCanvas(context.Background(), ws.ID, "env?"); err != nil || code != 200 {
		t.Fatalf("send: %d %s %v", code, body, err)
	}
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	n := srv.Notifications(ws.ID)
	if len(n) != 1 {
		t.Fatalf("notifications %+v, want the handler's one answer", n)
	}
	got := " " + n[0].Message + " " // the reply is trimmed
	for _, want := range []string{" ANTHROPIC_API_KEY=sk-ant-test ", " OPENAI_BASE_URL=http://127.0.0.1:11434/v1 ", " VIRTUAL_ENV=/opt/venv ", " MOLECULE_WORKSPACE_ID=" + ws.ID + " "} {
		if !strings.Contains(got, want) {
			t.Errorf("the handler's environment lacks %q: %s", want, got)
		}
	}
	for _, never := range []string{ws.Token, "MOLECULE_WORKSPACE_TOKEN=", "UNNAMED=", "NATS_URL="} {
		if strings.Contains(got, never) {
			t.Errorf("the handler's environment has %q: %s", never, got)
		}
	}
}

// Naming the workspace token in MOLECULE_HANDLER_ENV exits 2 naming the
// setting, before anything is contacted.
func TestHandlerEnvNamingTokenExits2(t *testing.T) {
	var hits atomic.Int64
	platform := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer platform.Close()
	t.Chdir(t.TempDir())
	const token = "secret-token-that-must-not-leak-0000000000"
	r := runCLI(t, []string{"MOLECULE_PLATFORM_URL=" + platform.URL, "MOLECULE_WORKSPACE_ID=35637291-d55e-4553-896c-13c2e02fe4f7",
		"MOLECULE_WORKSPACE_TOKEN=" + token, "MOLECULE_HANDLER=exec:/bin/cat",
		"MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY,MOLECULE_WORKSPACE_TOKEN"}, "connect", "--once")
	if r.code != exitUsage || !strings.Contains(r.stderr, "MOLECULE_HANDLER_ENV: MOLECULE_WORKSPACE_TOKEN is a workspace token") {
		t.Fatalf("exit %d, stderr %q; want exit 2 naming MOLECULE_HANDLER_ENV", r.code, r.stderr)
	}
	if strings.Contains(r.stderr+r.stdout, token) {
		t.Fatal("the token appears in the output")
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the platform got %d requests", n)
	}
}
