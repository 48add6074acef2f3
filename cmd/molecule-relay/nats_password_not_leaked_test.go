package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

const secretNATSPassword = "nats-pa55word-that-must-not-leak"

// startAuthNATS starts a NATS server that requires a user name and password
// and returns its URL with the credentials in it (a form NATS_URL accepts).
func startAuthNATS(t *testing.T, jetStream bool) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: jetStream, StoreDir: t.TempDir(),
		Username: "relay", Password: secretNATSPassword, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return fmt.Sprintf("nats://relay:%s@127.0.0.1:%d", secretNATSPassword, ns.Addr().(*net.TCPAddr).Port)
}

// The info-level "running" line of a long-running connect must not carry
// the NATS password of a NATS_URL with user information.
func TestConnectLogDoesNotLeakNATSPassword(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("audit-nats-url")
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + startAuthNATS(t, true), "MOLECULE_POLL_INTERVAL=200ms", "MOLECULE_LOG_LEVEL=info"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb pipelinetest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: environ}, []string{"connect"})
	}()
	waitUntil(t, func() bool { return strings.Contains(errb.String(), "msg=running") })
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("connect did not stop")
	}
	for _, line := range strings.Split(errb.String(), "\n") {
		if strings.Contains(line, secretNATSPassword) {
			t.Errorf("NATS password logged: %s", line)
		}
	}
}

// A topology failure (JetStream disabled) is reported with the NATS URL;
// the error printed must not carry the password.
func TestTopologyErrorDoesNotLeakNATSPassword(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("audit-nats-topology")
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + startAuthNATS(t, false)}
	r := runCLI(t, environ, "connect", "--once")
	if r.code == exitOK {
		t.Fatalf("connect --once succeeded without JetStream:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, secretNATSPassword) {
		t.Errorf("NATS password in the error output:\n%s", r.stderr)
	}
}
