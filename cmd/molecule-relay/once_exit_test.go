package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// connect --once exits 1 when any workspace did not do its work, and its
// summary names the workspace, the cause and what to do. Before, every
// case below exited 0 ("fetched 0 … handled 0"): Runtime.Once never looked
// at the per-workspace results.
func TestConnectOnceExitCodes(t *testing.T) {
	t.Parallel()
	type env struct {
		srv     *moleculetest.Server
		ws      moleculetest.Workspace
		environ []string
	}
	cases := []struct {
		name  string
		gen   moleculetest.Generation
		setup func(t *testing.T, e *env) // after a first successful run
		first func(t *testing.T, e *env) // instead, before the only run
		cause string
		hint  string
	}{
		{name: "unauthorized", cause: "unauthorized", hint: "MOLECULE_WORKSPACE_TOKEN",
			setup: func(t *testing.T, e *env) {
				other := e.srv.CreateWorkspace("someone-else")
				e.environ = append(e.environ, "MOLECULE_WORKSPACE_TOKEN="+other.Token)
			}},
		{name: "removed", cause: "removed", hint: "create a new workspace",
			setup: func(t *testing.T, e *env) { e.srv.Delete(e.ws.ID) }},
		{name: "paused", cause: "paused", hint: "Resume it",
			setup: func(t *testing.T, e *env) { e.srv.Pause(e.ws.ID) }},
		{name: "unreachable", cause: "unreachable", hint: "MOLECULE_PLATFORM_URL",
			setup: func(t *testing.T, e *env) {
				e.environ = append(e.environ, "MOLECULE_PLATFORM_URL=http://127.0.0.1:1")
			}},
		{name: "no poll mode", gen: moleculetest.Gen2026_04, cause: "no_poll_mode", hint: "upgrade the platform"},
		{name: "registration refused", cause: "registration_refused", hint: "/registry/register",
			first: func(t *testing.T, e *env) {
				e.srv.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/registry/register",
					Status: http.StatusBadRequest, Body: `{"error":"url is required for push-mode workspaces"}`})
			}},
		{name: "dead-lettered", cause: "dead_lettered", hint: "dlq replay",
			setup: func(t *testing.T, e *env) {
				script := t.TempDir() + "/agent.sh"
				writeScript(t, script, "#!/bin/sh\necho 'cannot digest' >&2\nexit 65\n")
				e.environ = append(e.environ, "MOLECULE_HANDLER=exec:"+script)
				if code, _, err := e.srv.SendCanvas(context.Background(), e.ws.ID, "poison"); err != nil || code != 200 {
					t.Fatalf("send: %d %v", code, err)
				}
			}},
		{name: "handler failure left pending", cause: "pending", hint: "run again",
			setup: func(t *testing.T, e *env) {
				script := t.TempDir() + "/agent.sh"
				writeScript(t, script, "#!/bin/sh\necho 'try later' >&2\nexit 75\n")
				e.environ = append(e.environ, "MOLECULE_HANDLER=exec:"+script)
				if code, _, err := e.srv.SendCanvas(context.Background(), e.ws.ID, "hello"); err != nil || code != 200 {
					t.Fatalf("send: %d %v", code, err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gen := tc.gen
			srv := moleculetest.NewServer(moleculetest.WithGeneration(gen))
			t.Cleanup(srv.Close)
			e := &env{srv: srv, ws: srv.CreateWorkspace("ci-agent")}
			e.environ = []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + e.ws.ID,
				"MOLECULE_WORKSPACE_TOKEN=" + e.ws.Token, "NATS_URL=" + natstest.Start(t).ClientURL()}
			if tc.first != nil {
				tc.first(t, e)
			}
			if tc.setup != nil {
				if r := runCLI(t, e.environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
					t.Fatalf("first run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
				}
				tc.setup(t, e)
			}
			r := runCLI(t, e.environ, "connect", "--once", "--idle", "200ms")
			if r.code != exitFailed {
				t.Fatalf("exit %d, want %d\n%s\n%s", r.code, exitFailed, r.stdout, r.stderr)
			}
			line := ""
			for _, l := range strings.Split(r.stdout, "\n") {
				if strings.HasPrefix(l, "FAILED") {
					line = l
				}
			}
			if !strings.Contains(line, ": "+tc.cause) || !strings.Contains(line, tc.hint) {
				t.Fatalf("summary %q does not name cause %q with %q\n%s", line, tc.cause, tc.hint, r.stdout)
			}
			if tc.cause != "pending" && tc.cause != "dead_lettered" && !strings.Contains(line, "workspace "+e.ws.ID) {
				t.Fatalf("summary %q does not name the workspace", line)
			}
		})
	}
}
