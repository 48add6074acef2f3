package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// doctorWorld is a workspace on the platform double, registered in poll
// mode by an earlier run whose heartbeats stopped (the platform's sweep
// made it awaiting_agent), with one message queued on its feed; and the
// environment connect would read for it.
type doctorWorld struct {
	srv      *moleculetest.Server
	ws       moleculetest.Workspace
	environ  []string
	before   moleculetest.WorkspaceStatus
	requests int
}

func newDoctorWorld(t *testing.T, extra ...string) *doctorWorld {
	t.Helper()
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("doctor")
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background(), molecule.RegisterRequest{}); err != nil {
		t.Fatal(err)
	}
	srv.SetStatus(ws.ID, "awaiting_agent")
	if code, body, err := srv.SendCanvas(context.Background(), ws.ID, "hello"); err != nil || code != 200 {
		t.Fatalf("send: %d %s %v", code, body, err)
	}
	environ := append([]string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "nats")}, extra...)
	return &doctorWorld{srv: srv, ws: ws, environ: environ, before: srv.Status(ws.ID), requests: len(srv.Requests())}
}

// doctor runs molecule-relay doctor and logs what it printed (the
// closing note quotes it).
func (w *doctorWorld) doctor(t *testing.T, extra ...string) result {
	t.Helper()
	r := runCLI(t, append(append([]string{}, w.environ...), extra...), "doctor")
	t.Logf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if strings.Contains(r.stdout+r.stderr, w.ws.Token) {
		t.Error("doctor printed the token")
	}
	return r
}

// assertNoWrite checks that the platform saw reads only: no register, no
// heartbeat, no notify, no ack, no checkpoint or other row.
func (w *doctorWorld) assertNoWrite(t *testing.T) {
	t.Helper()
	for _, req := range w.srv.Requests()[w.requests:] {
		if req.Method != "GET" {
			t.Errorf("doctor sent %s %s", req.Method, req.Path)
		}
	}
	st := w.srv.Status(w.ws.ID)
	if st.Registrations != w.before.Registrations || st.Heartbeats != w.before.Heartbeats || st.Status != w.before.Status {
		t.Errorf("doctor changed the workspace: %+v, was %+v", st, w.before)
	}
	if n := len(w.srv.Rows(w.ws.ID)); n != 1 {
		t.Errorf("%d rows on the feed, want the 1 message (no checkpoint row)", n)
	}
	if n := len(w.srv.Notifications(w.ws.ID)); n != 0 || w.srv.AckedSeq(w.ws.ID) != 0 {
		t.Errorf("notifications %d, acked seq %d; want none", n, w.srv.AckedSeq(w.ws.ID))
	}
}

func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("output lacks %q", l)
		}
	}
}

// Healthy, against the double and a NATS server: every check passes,
// exit 0, and neither the platform nor NATS was changed.
func TestDoctorHealthyExits0AndChangesNothing(t *testing.T) {
	nats := natstest.Start(t)
	w := newDoctorWorld(t, "NATS_URL="+nats.ClientURL())
	r := w.doctor(t)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0", r.code)
	}
	wantLines(t, r.stdout, "ok    platform       reachable", "ok    token          accepted",
		"ok    state          awaiting_agent", "ok    poll mode      yes: a 2026-08 platform or newer (rows carry seq)",
		"ok    rate limit", "ok    event stream   open", "ok    nats           connected",
		"ok    jetstream      on; [MOLECULE_INBOUND MOLECULE_REPLY MOLECULE_DLQ] not created yet", "0 failed, 0 warning(s)")
	w.assertNoWrite(t)
	_, js := natstest.Connect(t, nats.ClientURL())
	names := js.StreamNames(context.Background())
	for name := range names.Name() {
		t.Errorf("doctor created stream %s", name)
	}
}

// A wrong token: the token line fails and says what to do; exit 1.
func TestDoctorBadTokenExits1(t *testing.T) {
	w := newDoctorWorld(t)
	r := w.doctor(t, "MOLECULE_WORKSPACE_TOKEN=not-this-workspaces-token")
	if r.code != exitFailed {
		t.Fatalf("exit %d, want 1", r.code)
	}
	wantLines(t, r.stdout, "ok    platform", "FAIL  token          refused (HTTP 401)", "Settings → Workspace Tokens", "1 failed")
	w.assertNoWrite(t)
}

// A platform URL nothing listens on: the platform line fails; exit 1.
func TestDoctorUnreachablePlatformExits1(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	w := newDoctorWorld(t)
	r := w.doctor(t, "MOLECULE_PLATFORM_URL="+closed)
	if r.code != exitFailed {
		t.Fatalf("exit %d, want 1", r.code)
	}
	wantLines(t, r.stdout, "FAIL  platform       unreachable", "check MOLECULE_PLATFORM_URL", "1 failed")
}

// A paused workspace fails, as connect --once does (it fetches nothing
// from it): exit 1, and it stays paused.
func TestDoctorPausedWorkspaceExits1AndLeavesItPaused(t *testing.T) {
	w := newDoctorWorld(t)
	w.srv.Pause(w.ws.ID)
	w.before = w.srv.Status(w.ws.ID)
	r := w.doctor(t)
	if r.code != exitFailed {
		t.Fatalf("exit %d, want 1", r.code)
	}
	wantLines(t, r.stdout, "FAIL  state          paused on the platform", "resume it in the canvas", "1 failed, 0 warning(s)")
	if st := w.srv.Status(w.ws.ID).Status; st != "paused" {
		t.Errorf("status %q after doctor, want paused", st)
	}
	w.assertNoWrite(t)
}

// A removed workspace fails with the platform's hint.
func TestDoctorRemovedWorkspaceExits1(t *testing.T) {
	w := newDoctorWorld(t)
	w.srv.Delete(w.ws.ID)
	r := w.doctor(t)
	if r.code != exitFailed {
		t.Fatalf("exit %d, want 1", r.code)
	}
	wantLines(t, r.stdout, "FAIL  workspace      removed on the platform (Create a replacement workspace")
}

// A configuration that does not load exits 2, as every command's does.
func TestDoctorBadConfigurationExits2(t *testing.T) {
	w := newDoctorWorld(t)
	r := runCLI(t, w.environ[:1], "doctor")
	if r.code != exitUsage || !strings.Contains(r.stderr, "MOLECULE_WORKSPACE_ID") {
		t.Fatalf("exit %d, stderr %q; want 2 naming MOLECULE_WORKSPACE_ID", r.code, r.stderr)
	}
}

// The embedded server's store: doctor names where it is and the pid of
// the process that holds it, without starting a server or taking it.
func TestDoctorNamesTheStoresHolder(t *testing.T) {
	w := newDoctorWorld(t)
	dir := filepath.Join(t.TempDir(), "held")
	r := w.doctor(t, "NATS_STORE_DIR="+dir)
	wantLines(t, r.stdout, "ok    store          embedded server, store "+dir+": not created yet")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("doctor created the store (%v)", err)
	}
	conn, err := broker.Connect(context.Background(), broker.Config{StoreDir: dir, EmbeddedPort: -1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r = w.doctor(t, "NATS_STORE_DIR="+dir)
	if r.code != exitOK {
		t.Errorf("exit %d, want 0 (a warning)", r.code)
	}
	wantLines(t, r.stdout, "warn  store          embedded server, store "+dir+": in use by pid "+strconv.Itoa(os.Getpid()))
}

// A workspace no agent ever registered has no agent card: doctor says
// so, and leaves it unregistered.
func TestDoctorTellsANeverRegisteredWorkspace(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("fresh")
	r := runCLI(t, []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "nats")}, "doctor")
	if r.code != exitOK || !strings.Contains(r.stdout, "never registered (it has no agent card)") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := srv.Status(ws.ID).Registrations; n != 0 {
		t.Errorf("%d registrations after doctor", n)
	}
}

// A platform before 2026-05 has no poll mode: doctor fails it unless push
// mode is configured, as connect needs.
func TestDoctorOldPlatformNeedsPushMode(t *testing.T) {
	srv := moleculetest.NewServer(moleculetest.WithGeneration(moleculetest.Gen2026_04))
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("old")
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "nats"), "MOLECULE_SSE=false"}
	r := runCLI(t, environ, "doctor")
	t.Logf("exit %d\n%s", r.code, r.stdout)
	if r.code != exitFailed || !strings.Contains(r.stdout, "FAIL  poll mode      none: the platform is older than 2026-05") {
		t.Fatalf("exit %d; want 1 with the poll mode line failing", r.code)
	}
	r = runCLI(t, append(environ, "MOLECULE_PUSH_LISTEN=127.0.0.1:0", "MOLECULE_PUSH_URL=http://127.0.0.1:9"), "doctor")
	if r.code != exitOK || !strings.Contains(r.stdout, "ok    poll mode      none (a platform before 2026-05); push mode is configured") {
		t.Fatalf("with push mode: exit %d\n%s", r.code, r.stdout)
	}
}

// Several workspaces are checked side by side and reported in the order
// they are configured, the failures of all counted.
func TestDoctorReportsEachWorkspaceInOrder(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	a, b, c := srv.CreateWorkspace("a"), srv.CreateWorkspace("b"), srv.CreateWorkspace("c")
	r := runCLI(t, []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_IDS=" + a.ID + "," + b.ID + "," + c.ID,
		"MOLECULE_WORKSPACE_TOKENS=" + a.Token + ",wrong," + c.Token, "NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "nats")}, "doctor")
	ia, ib, ic := strings.Index(r.stdout, "workspace "+a.ID), strings.Index(r.stdout, "workspace "+b.ID), strings.Index(r.stdout, "workspace "+c.ID)
	if r.code != exitFailed || ia < 0 || !(ia < ib && ib < ic) || !strings.Contains(r.stdout, "1 failed") {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
	if fail := strings.Index(r.stdout, "FAIL  token"); fail < ib || fail > ic {
		t.Errorf("the token failure is not in b's report:\n%s", r.stdout)
	}
}
