package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// An ephemeral CI runner: every connect --once starts with an empty store
// (a new NATS_STORE_DIR, no NATS_URL). The platform is the only state: the
// run leaves a checkpoint on the workspace's feed, and the next fresh run
// resumes from it, so every message is answered exactly once across runs.
// Before, with MOLECULE_BACKLOG_WINDOW=0 (the default), a fresh runner
// seeded at "now" and never answered what queued between runs (and exited
// 0); with a backlog window it answered again what was already answered.
func TestFreshRunnerResumesFromPlatformCheckpoint(t *testing.T) {
	t.Parallel()
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("ci-agent")
	freshRun := func() result {
		t.Helper()
		environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
			"NATS_STORE_DIR=" + t.TempDir()}
		return runCLI(t, environ, "connect", "--once", "--idle", "200ms")
	}
	fresh := func(what string) {
		t.Helper()
		if r := freshRun(); r.code != exitOK {
			t.Fatalf("%s: exit %d\n%s\n%s", what, r.code, r.stdout, r.stderr)
		}
	}
	send := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if code, _, err := srv.SendCanvas(context.Background(), ws.ID, fmt.Sprintf("%s-%d", prefix, i)); err != nil || code != 200 {
				t.Fatalf("send: %d %v", code, err)
			}
		}
	}
	check := func(want int) {
		t.Helper()
		got := map[string]int{}
		for _, n := range srv.Notifications(ws.ID) {
			got[n.Message]++
		}
		total := 0
		for m, c := range got {
			if c != 1 || !strings.HasPrefix(m, "echo: ") {
				t.Fatalf("reply %q posted %d times", m, c)
			}
			total += c
		}
		if total != want {
			t.Fatalf("%d replies, want %d: %v", total, want, got)
		}
	}

	fresh("first run (empty feed)")
	send("a", 5)
	fresh("second run")
	check(5)
	fresh("third run (nothing new)")
	check(5)
	send("b", 3)
	fresh("fourth run")
	check(8)

	// The checkpoints are self-reports: agent_log rows whose source is the
	// workspace itself; none was delivered as a message (check above).
	n := 0
	for _, raw := range srv.Rows(ws.ID) {
		var r struct {
			ActivityType string `json:"activity_type"`
			SourceID     string `json:"source_id"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if r.ActivityType == "agent_log" {
			n++
			if r.SourceID != ws.ID {
				t.Fatalf("checkpoint row with source %q", r.SourceID)
			}
		}
	}
	if n != 4 {
		t.Fatalf("%d checkpoint rows, want one per run (4)", n)
	}

	// Only the first run registered: a registration would un-pause a
	// paused workspace, so a fresh runner paused says so and leaves it.
	registers := 0
	for _, r := range srv.Requests() {
		if r.Method == "POST" && r.Path == "/registry/register" {
			registers++
		}
	}
	if registers != 1 {
		t.Fatalf("%d registrations over 4 fresh runs, want 1", registers)
	}
	srv.Pause(ws.ID)
	if r := freshRun(); r.code != exitFailed || !strings.Contains(r.stdout, ": paused") {
		t.Fatalf("paused: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if st := srv.Status(ws.ID); st.Status != "paused" || st.Registrations != 1 {
		t.Fatalf("a fresh run un-paused the workspace: %+v", st)
	}
}
