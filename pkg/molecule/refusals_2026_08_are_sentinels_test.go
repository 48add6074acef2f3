package molecule_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The 2026-08 platform's permanent refusals each match their own sentinel
// (and the 401s ErrUnauthorized too), answered by the double as
// enteros-core aeec8e47 answers them (moleculetest's
// refusals_2026_08_test.go names the source lines).
func TestRefusalsOf2026_08MatchTheirSentinels(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, ca := registered(t, s, "a")
	b, cb := registered(t, s, "b")

	s.SetTalkToUser(a.ID, false)
	_, err := ca.Notify(ctx, "hello", nil)
	if !errors.Is(err, molecule.ErrTalkToUserDisabled) || errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Errorf("notify with talk to user off: %v", err)
	}

	s.SetCanDelegate(b.ID, false)
	_, err = cb.SendA2A(ctx, molecule.A2AMessage{To: a.ID, Text: "reply", MessageID: "m-1"})
	if !errors.Is(err, molecule.ErrDelegationDisabled) {
		t.Errorf("a2a from can_delegate=false: %v", err)
	}
	s.SetCanDelegate(b.ID, true)

	s.SetBudgetExceeded(a.ID, "monthly")
	_, err = cb.SendA2A(ctx, molecule.A2AMessage{To: a.ID, Text: "reply", MessageID: "m-2"})
	if !errors.Is(err, molecule.ErrBudgetExceeded) {
		t.Errorf("a2a to a workspace over budget: %v", err)
	}
	s.SetBudgetExceeded(a.ID)

	_, err = cb.SendA2A(ctx, molecule.A2AMessage{To: a.ID, Text: strings.Repeat("x", 16<<20), MessageID: "m-3"})
	if !errors.Is(err, molecule.ErrBodyTooLarge) {
		t.Errorf("a2a over 16 MiB: %v", err)
	}

	// A client whose workspace id is not its token's (a misconfiguration).
	wrong := clientFor(t, s, moleculetest.Workspace{ID: a.ID, Name: "a", Token: b.Token})
	_, err = wrong.SendA2A(ctx, molecule.A2AMessage{To: b.ID, Text: "reply", MessageID: "m-4"})
	if !errors.Is(err, molecule.ErrCallerMismatch) || !errors.Is(err, molecule.ErrUnauthorized) {
		t.Errorf("a2a with another workspace's token: %v", err)
	}
}

// A /memories 503 without a memory plugin (enteros-core aeec8e47
// handlers/memories.go:350-355) is not "platform unavailable": the GET is
// not retried, and the caller learns it at once.
func TestMemoryNotConfiguredIsNotRetried(t *testing.T) {
	s := platform(t, moleculetest.WithoutMemoryPlugin())
	a, ca := registered(t, s, "a")
	start := time.Now()
	_, err := ca.RecallMemory(context.Background(), "", "")
	took := time.Since(start)
	if !errors.Is(err, molecule.ErrMemoryNotConfigured) || errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Fatalf("recall without a plugin: %v", err)
	}
	n := 0
	for _, r := range s.Requests() {
		if r.Method == http.MethodGet && r.Path == "/workspaces/"+a.ID+"/memories" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d GETs of /memories, want 1 (took %v)", n, took)
	}
	if _, err := ca.CommitMemory(context.Background(), "a fact", ""); !errors.Is(err, molecule.ErrMemoryNotConfigured) {
		t.Errorf("commit without a plugin: %v", err)
	}
}

// The 2026-08 plugin-backed search ignores q and scope (enteros-core
// aeec8e47 handlers/memories.go:368-371); RecallMemory filters as the
// older platform did.
func TestRecallMemoryFiltersWhatThePluginIgnores(t *testing.T) {
	ctx := context.Background()
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_05, moleculetest.Gen2026_08} {
		s := platform(t, moleculetest.WithGeneration(gen))
		_, ca := registered(t, s, "a")
		for _, f := range []struct{ text, scope string }{{"Apples are red", "LOCAL"}, {"pears", "LOCAL"}, {"apple pie", "TEAM"}} {
			if _, err := ca.CommitMemory(ctx, f.text, f.scope); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := ca.RecallMemory(ctx, "apple", "LOCAL")
		if err != nil || len(rows) != 1 || rows[0].Content != "Apples are red" {
			t.Errorf("%s: recall apple LOCAL = %+v, %v", gen, rows, err)
		}
	}
}
