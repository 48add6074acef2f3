package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A row that commits behind a one-shot run's cursor after that run read
// the feed (its created_at taken before the commit, docs/protocol.md §4)
// is answered by the next run, however long after: the next run's
// overlap re-read reaches back to the overlap window before the cursor it
// resumes from, not only the window before now. Before, with the next run
// later than the overlap window (2 min by default; 2 s here), the row was
// never answered, on main as on the fast one-shot. Both poll-mode
// generations: on 2026-08 the (created_at, seq) cursor does not help, as
// seq is taken at insert (§13).
func TestOnceAnswersARowCommittedBehindTheLastRunsCursor(t *testing.T) {
	t.Parallel()
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_05, moleculetest.Gen2026_08} {
		t.Run(gen.String(), func(t *testing.T) {
			t.Parallel()
			const lag, window = 700 * time.Millisecond, 2 * time.Second
			// Every second queued row commits lag after its created_at.
			srv := moleculetest.NewServer(moleculetest.WithGeneration(gen), moleculetest.WithLateCommit(0.5, lag))
			t.Cleanup(srv.Close)
			ws := srv.CreateWorkspace("ci-agent")
			environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
				"MOLECULE_OVERLAP_WINDOW=" + window.String(), "MOLECULE_OVERLAP_EVERY=1s"}
			run := func(what string) {
				t.Helper()
				r := runCLI(t, append(environ, "NATS_STORE_DIR="+t.TempDir()), "connect", "--once")
				if r.code != exitOK {
					t.Fatalf("%s: exit %d\n%s\n%s", what, r.code, r.stdout, r.stderr)
				}
			}
			replies := func() []string {
				var got []string
				for _, n := range srv.Notifications(ws.ID) {
					got = append(got, n.Message)
				}
				return got
			}
			run("first run")
			for _, text := range []string{"on time", "late", "after it"} { // queued rows 1, 2 (late), 3
				if code, _, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code != 200 {
					t.Fatalf("send: %d %v", code, err)
				}
			}
			sent := time.Now()
			run("the run whose cursor passes the late row")
			if got := replies(); slices.Contains(got, "echo: late") || len(got) != 2 {
				t.Fatalf("replies %q: the late row was visible to the run (its lag is too short for this machine)", got)
			}
			// The next run comes after the row committed and after the
			// overlap window has passed since: that time is the test.
			time.Sleep(time.Until(sent.Add(lag + window + 500*time.Millisecond)))
			run("the next run")
			if got := replies(); !slices.Contains(got, "echo: late") || len(got) != 3 {
				t.Fatalf("replies %q, want the late row answered, and each once", got)
			}
		})
	}
}
