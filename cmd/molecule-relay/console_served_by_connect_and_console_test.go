package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// connect serves the console on MOLECULE_CONSOLE_LISTEN, and
// `molecule-relay console` serves the same relay's console from its NATS
// (NATS_URL) once connect has stopped; each asks for the token.
func TestConnectAndTheConsoleCommandServeTheConsole(t *testing.T) {
	t.Parallel()
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("agent")
	ns := natstest.Start(t)
	base := []string{"NATS_URL=" + ns.ClientURL(), "MOLECULE_CONSOLE_TOKEN=tok"}
	overview := func(addr string) func() bool {
		return func() bool {
			req, _ := http.NewRequest("GET", "http://"+addr+"/api/overview", nil)
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == 200 && strings.Contains(string(b), ws.ID)
		}
	}
	serve := func(what string, environ []string, args ...string) {
		t.Helper()
		addr := freeListenAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		var errb bytes.Buffer
		go func() {
			done <- run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errb,
				environ: append(environ, "MOLECULE_CONSOLE_LISTEN="+addr)}, args)
		}()
		pipelinetest.Eventually(t, 30*time.Second, what+" serving the console with the workspace", overview(addr))
		if resp, err := http.Get("http://" + addr + "/api/overview"); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: console without the token: %v %v, want 401", what, resp, err)
		}
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("%s: exit %d\n%s", what, code, errb.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop", what)
		}
	}
	serve("connect", append(base, "MOLECULE_PLATFORM_URL="+srv.URL(), "MOLECULE_WORKSPACE_ID="+ws.ID,
		"MOLECULE_WORKSPACE_TOKEN="+ws.Token, "MOLECULE_HANDLER=echo"), "connect")
	serve("console", base, "console")
}

// Without a token, the console command refuses a listen address beyond
// loopback before it connects to anything.
func TestConsoleCommandRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	r := runCLI(t, []string{"NATS_URL=nats://127.0.0.1:1", "MOLECULE_CONSOLE_LISTEN=0.0.0.0:8090"}, "console")
	if r.code != exitUsage || !strings.Contains(r.stderr, "MOLECULE_CONSOLE_TOKEN") {
		t.Fatalf("exit %d, stderr %s; want a usage error naming MOLECULE_CONSOLE_TOKEN", r.code, r.stderr)
	}
}

func freeListenAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// --console serves the console on 127.0.0.1:8090, unless
// MOLECULE_CONSOLE_LISTEN names another address.
func TestConsoleFlagServesOnTheDefaultAddressUnlessOneIsSet(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		flag      consoleFlag
		set, want string
	}{{true, "", defaultConsoleListen}, {true, "127.0.0.1:9999", "127.0.0.1:9999"}, {false, "", ""}} {
		cfg := &config.Config{ConsoleListen: tt.set}
		tt.flag.apply(cfg)
		if cfg.ConsoleListen != tt.want {
			t.Errorf("--console=%v with %q: %q, want %q", tt.flag, tt.set, cfg.ConsoleListen, tt.want)
		}
	}
}

// `molecule-relay console` on the store of a running connect joins that
// relay's embedded server (the store is locked by connect) instead of
// failing with "in use by another process".
func TestConsoleCommandJoinsARunningConnectOnItsStore(t *testing.T) {
	t.Parallel()
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("agent")
	store := t.TempDir()
	environ := []string{"NATS_STORE_DIR=" + store, "MOLECULE_CONSOLE_TOKEN=tok"}
	start := func(extra []string, args ...string) (stop func() (int, string)) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel) // a failed wait below still stops what started
		done := make(chan int, 1)
		var errb bytes.Buffer
		go func() {
			done <- run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errb,
				environ: append(append([]string{}, environ...), extra...)}, args)
		}()
		return func() (int, string) {
			cancel()
			select {
			case code := <-done:
				return code, errb.String()
			case <-time.After(30 * time.Second):
				t.Fatalf("%v did not stop", args)
				return 0, ""
			}
		}
	}
	stopConnect := start([]string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "MOLECULE_HANDLER=echo"}, "connect")
	pipelinetest.Eventually(t, 30*time.Second, "connect publishing its embedded server in the store", func() bool {
		_, err := os.Stat(filepath.Join(store, "molecule-relay.server.json"))
		return err == nil
	})
	addr := freeListenAddr(t)
	stopConsole := start([]string{"MOLECULE_CONSOLE_LISTEN=" + addr}, "console")
	pipelinetest.Eventually(t, 30*time.Second, "the console on connect's store listing the workspace", func() bool {
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/overview", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), ws.ID)
	})
	if code, stderr := stopConsole(); code != exitOK {
		t.Errorf("console: exit %d\n%s", code, stderr)
	}
	if code, stderr := stopConnect(); code != exitOK {
		t.Errorf("connect: exit %d\n%s", code, stderr)
	}
}
