package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A relay's first start answers the messages queued before it, oldest
// first, with no setting (the backlog window is on by default). A relay
// on a fresh store after an earlier one answered them (no checkpoint: a
// long-running relay writes none) answers none of them again: the earlier
// relay's replies on the feed say they were answered. Before, the first
// start seeded at the newest row and the three messages were never
// handled (rows_read=2 published=0). Both poll-mode generations.
func TestColdStartAnswersWhatWasQueuedAndNothingTwice(t *testing.T) {
	t.Parallel()
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_05, moleculetest.Gen2026_08} {
		t.Run(gen.String(), func(t *testing.T) {
			t.Parallel()
			coldStartLosesNothing(t, gen)
		})
	}
}

func coldStartLosesNothing(t *testing.T, gen moleculetest.Generation) {
	srv := moleculetest.NewServer(moleculetest.WithGeneration(gen))
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("agent")
	freshRun := func(what string) time.Time {
		t.Helper()
		environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
			"NATS_STORE_DIR=" + t.TempDir(), "MOLECULE_CHECKPOINT=false",
			// One at a time, so the replies' order is the delivery order.
			"MOLECULE_CONCURRENCY=1", "MOLECULE_REPLY_CONCURRENCY=1"}
		start := time.Now()
		if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
			t.Fatalf("%s: exit %d\n%s\n%s", what, r.code, r.stdout, r.stderr)
		}
		return start
	}
	send := func(texts ...string) {
		t.Helper()
		for _, s := range texts {
			if code, _, err := srv.SendCanvas(context.Background(), ws.ID, s); err != nil || code != 200 {
				t.Fatalf("send: %d %v", code, err)
			}
		}
	}
	replies := func() []string {
		var out []string
		for _, n := range srv.Notifications(ws.ID) {
			out = append(out, n.Message)
		}
		return out
	}

	// The workspace is in poll mode (registered by an earlier client)
	// and messages queue before this relay ever ran.
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background(), molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
		t.Fatal(err)
	}
	send("first", "second", "third")
	start := freshRun("first start")
	if got, want := strings.Join(replies(), "|"), "echo: first|echo: second|echo: third"; got != want {
		t.Fatalf("replies %q, want %q (every queued message, oldest first)", got, want)
	}
	t.Logf("first start: 3 queued messages answered, the first %s after the start", srv.Notifications(ws.ID)[0].At.Sub(start).Round(time.Millisecond))

	freshRun("a fresh store after the earlier relay answered")
	if n := len(replies()); n != 3 {
		t.Fatalf("%d replies after a second fresh start, want still 3: %q", n, replies())
	}
	send("fourth", "fifth")
	freshRun("a fresh store with two new messages")
	if got, want := strings.Join(replies()[3:], "|"), "echo: fourth|echo: fifth"; got != want {
		t.Fatalf("new replies %q, want %q", got, want)
	}
	counts := map[string]int{}
	for _, r := range replies() {
		counts[r]++
	}
	for r, n := range counts {
		if n != 1 {
			t.Errorf("%q answered %d times", r, n)
		}
	}
	t.Logf("answered twice: %d of %d", len(replies())-len(counts), len(counts))
}
