package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// While connect runs on the embedded store (a real process), status and
// dlq show reach its server through the store: the dead-letter line names
// the sequence, and dlq show SEQ prints that dead letter at that moment.
// Before, both exited 1 ("NATS_STORE_DIR is in use by another process").
// history and dlq replay work too: the replayed message is answered by
// the running relay. The first stop line says a second Ctrl-C exits at
// once; a clean stop removes the published server, and status then opens
// the store itself.
func TestStatusAndDLQShowReachARunningConnect(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a relay process")
	}
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("inspected")
	store := t.TempDir()
	script := filepath.Join(t.TempDir(), "agent.sh")
	writeScript(t, script, "#!/bin/sh\ncat >/dev/null\necho 'cannot digest' >&2\nexit 65\n")
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_STORE_DIR=" + store, "MOLECULE_POLL_INTERVAL=200ms", "MOLECULE_HANDLER=exec:" + script, "MOLECULE_LOG_LEVEL=info"}
	c := startChild(t, environ, "connect")
	waitUntil(t, func() bool { return srv.Status(ws.ID).DeliveryMode == "poll" })
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "poison"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	line := c.waitLog(t, "message dead-lettered", 30*time.Second)
	m := regexp.MustCompile("`molecule-relay dlq show ([0-9]+)`").FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the dead-letter line names no sequence to show: %s", line)
	}

	st := runCLI(t, environ, "status")
	if st.code != exitOK || !strings.Contains(st.stdout, "dead letters: 1") {
		t.Fatalf("status while connect runs: exit %d\n%s\n%s", st.code, st.stdout, st.stderr)
	}
	show := runCLI(t, environ, "dlq", "show", m[1])
	if show.code != exitOK || !strings.Contains(show.stdout, `"reason": "permanent_error"`) || !strings.Contains(show.stdout, ws.ID) {
		t.Fatalf("dlq show %s while connect runs: exit %d\n%s\n%s", m[1], show.code, show.stdout, show.stderr)
	}
	if strings.Contains(show.stdout, "poison") {
		t.Errorf("dlq show without --show-body printed the message:\n%s", show.stdout)
	}
	if h := runCLI(t, environ, "history", "show", ws.ID); h.code != exitOK {
		t.Errorf("history show while connect runs: exit %d\n%s\n%s", h.code, h.stdout, h.stderr)
	}
	// Fixed, the dead letter replayed into the running relay is answered.
	writeScript(t, script, "#!/bin/sh\ncat >/dev/null\necho digested\n")
	if rp := runCLI(t, environ, "dlq", "replay", m[1]); rp.code != exitOK {
		t.Fatalf("dlq replay %s while connect runs: exit %d\n%s", m[1], rp.code, rp.stderr)
	}
	waitUntil(t, func() bool { n := srv.Notifications(ws.ID); return len(n) == 1 && n[0].Message == "digested" })

	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if l := c.waitLog(t, "stop: finishing the work in flight", 10*time.Second); !strings.Contains(l, "press Ctrl-C again to exit at once") {
		t.Errorf("the first stop line does not say a second Ctrl-C exits at once: %s", l)
	}
	if code := c.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit %d after SIGINT; stderr:\n%s", code, c.stderr())
	}
	if _, err := os.Stat(filepath.Join(store, "molecule-relay.server.json")); !os.IsNotExist(err) {
		t.Errorf("the published server outlived a clean stop: %v", err)
	}
	if st := runCLI(t, environ, "status"); st.code != exitOK || !strings.Contains(st.stdout, "dead letters: 0") {
		t.Fatalf("status after the stop: exit %d\n%s\n%s", st.code, st.stdout, st.stderr)
	}
}

// A relay killed without a clean stop leaves its published server behind;
// status tells it from a live one (the store's lock died with the
// process) and opens the store itself instead of dialling a dead port.
func TestStatusAfterAKilledConnectOpensTheStoreItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a relay process")
	}
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("killed")
	store := t.TempDir()
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_STORE_DIR=" + store, "MOLECULE_POLL_INTERVAL=200ms", "MOLECULE_LOG_LEVEL=info"}
	c := startChild(t, environ, "connect")
	waitUntil(t, func() bool { return srv.Status(ws.ID).DeliveryMode == "poll" })
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 10*time.Second)
	if _, err := os.Stat(filepath.Join(store, "molecule-relay.server.json")); err != nil {
		t.Fatalf("a killed relay left no published server behind, so this test tests nothing: %v", err)
	}
	st := runCLI(t, environ, "status")
	if st.code != exitOK || !strings.Contains(st.stderr, "embedded nats-server started") {
		t.Fatalf("status after a killed connect: exit %d\n%s\n%s", st.code, st.stdout, st.stderr)
	}
}
