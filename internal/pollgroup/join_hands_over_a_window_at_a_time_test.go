package pollgroup_test

import (
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// A member that joins takes its share a window at a time: each old
// member stops at most HandoverWindow of the workspaces it hands over
// before their new owner claims them, and polls the rest meanwhile, so a
// workspace waits for its own hand-over, not for everyone's. Handed all
// at once, the joiner's 1,000 would all be unpolled together (1,058 of
// 3,000 at once with the window unbounded).
func TestJoinHandsOverAWindowAtATime(t *testing.T) {
	srv := natstest.Start(t)
	url := srv.ClientURL()
	ws := workspaceIDs(3000)
	tr := &tracker{by: map[string]string{}, total: len(ws)}
	startMember(t, url, "a", ws, tr)
	startMember(t, url, "b", ws, tr)
	tr.waitFor(t, "a and b share the fleet", func(s map[string]int, n int) bool { return n == len(ws) && s["a"] > 0 && s["b"] > 0 })

	tr.mu.Lock()
	tr.counting = true
	tr.mu.Unlock()
	startMember(t, url, "c", ws, tr)
	tr.waitFor(t, "c takes its share", func(s map[string]int, n int) bool {
		return n == len(ws) && s["c"] > len(ws)/4 && s["a"]+s["b"]+s["c"] == n
	})

	tr.mu.Lock()
	defer tr.mu.Unlock()
	t.Logf("c polls %d; at most %d of %d unpolled at once during the join", len(ws)-countBy(tr.by, "a")-countBy(tr.by, "b"), tr.mostUnpolled, len(ws))
	// A window's room comes back when the old member sees the new
	// owner's claim, which is a moment before the new owner starts the
	// poll: up to a pass of claims may be claimed and not yet polled.
	if most := 2*pollgroup.HandoverWindow + pollgroup.WritesPerPass; tr.mostUnpolled > most || tr.mostUnpolled == 0 {
		t.Errorf("%d workspaces unpolled at once during the join, want 1..%d (two members handing over a window each, and a pass of claims not started yet)", tr.mostUnpolled, most)
	}
	if len(tr.doubles) > 0 {
		t.Fatalf("workspaces polled by two members at once: %v", tr.doubles)
	}
}

func countBy(by map[string]string, member string) int {
	n := 0
	for _, m := range by {
		if m == member {
			n++
		}
	}
	return n
}
