package molecule_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Two workspaces of one org share the org's bucket on the platform; their
// clients share one RateBudget: what one learns or takes the other sees,
// and the reserve TakeBudget keeps is per member (each needs its own
// heartbeats).
func TestSharedRateBudget(t *testing.T) {
	srv := moleculetest.NewServer(moleculetest.WithRateLimit(30, time.Minute))
	t.Cleanup(srv.Close)
	budget := molecule.NewRateBudget()
	var cs []*molecule.Client
	for _, name := range []string{"a", "b"} {
		ws := srv.CreateWorkspace(name)
		c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token,
			OrgID: "org-1", MaxRetries: -1, RateBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	a, b := cs[0], cs[1]
	if _, err := a.State(context.Background()); err != nil {
		t.Fatal(err)
	}
	// One request in the org bucket: b sees what a's answer said.
	if rl := b.RateLimit(); !rl.Known || rl.Limit != 30 || rl.Remaining != 29 {
		t.Fatalf("b's view after a's request: %+v; want 29 of 30", rl)
	}
	if _, err := b.State(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rl := a.RateLimit(); rl.Remaining != 28 {
		t.Fatalf("a's view after b's request: %+v; want 28", rl)
	}
	// Reserve 10 per member, two members: 20 stay unspent, so 8 of the
	// 28 may be taken, by either client.
	for i := range 8 {
		if d := []*molecule.Client{a, b}[i%2].TakeBudget(10); d != 0 {
			t.Fatalf("take %d: wait %s with %d remaining", i, d, a.RateLimit().Remaining)
		}
	}
	if d := a.TakeBudget(10); d < 50*time.Second {
		t.Fatalf("take past the shared reserve: wait %s; want the rest of the window", d)
	}
	if d := b.TakeBudget(10); d < 50*time.Second {
		t.Fatalf("b took past the shared reserve: wait %s", d)
	}
}

// A client without a shared budget keeps its own, with its own reserve:
// the behaviour of a single workspace (NEW keys the bucket by token when no
// org id is sent).
func TestOwnRateBudgetsAreSeparate(t *testing.T) {
	srv := moleculetest.NewServer(moleculetest.WithRateLimit(30, time.Minute))
	t.Cleanup(srv.Close)
	var cs []*molecule.Client
	for _, name := range []string{"a", "b"} {
		ws := srv.CreateWorkspace(name)
		c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if _, err := cs[0].State(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rl := cs[1].RateLimit(); rl.Known {
		t.Fatalf("b learnt a's bucket: %+v", rl)
	}
	for i := range 19 { // 29 remaining, reserve 10
		if d := cs[0].TakeBudget(10); d != 0 {
			t.Fatalf("take %d: wait %s", i, d)
		}
	}
	if d := cs[0].TakeBudget(10); d == 0 {
		t.Fatal("took past the reserve")
	}
}
