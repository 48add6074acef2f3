package replier_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A drain under a deadline takes no reply while the workspace's rate
// budget is at its reserve and resets only after the deadline: otherwise
// the reply would wait to the deadline and be handed back, holding the
// invocation for nothing and spending one of its MaxDeliver deliveries
// without a post, again in every scheduled invocation while the budget
// stays tight (an org bucket shared with busy workspaces).
func TestDrainTakesNoReplyItsBudgetCannotPostInTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(20, time.Minute))
	c := e.clients[e.a.ID]
	// Other requests of the token spend the window down to the reserve.
	for {
		if _, err := c.State(fixture(t)); err != nil {
			t.Fatal(err)
		}
		if c.RateLimit().Remaining <= 5 {
			break
		}
	}
	e.publish(t, e.canvasReply("act-1", "reply"))
	r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{StartMargin: 100 * time.Millisecond}, RateReserve: 5})

	// The shortest invocation that still admits a reply (minPostWindow is
	// at least MinA2ATimeout + A2AGrace); the window resets ~1 min later.
	deadline := replier.MinA2ATimeout + replier.A2AGrace + 300*time.Millisecond
	inv, cancel := context.WithTimeout(bg(t), deadline)
	defer cancel()
	start := time.Now()
	st, err := r.Drain(inv, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	ci, err := e.topo.Replier.Info(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumRedelivered != 0 || ci.NumAckPending != 0 || st.Deferred != 0 || took > 3*time.Second {
		t.Fatalf("drain took %s (deadline %s), stats %+v, consumer: %d redelivered, %d ack pending; want the reply left untaken at once",
			took.Round(time.Millisecond), deadline, st, ci.NumRedelivered, ci.NumAckPending)
	}
}

// In a drain with replies of several workspaces, one whose rate budget
// resets only after the deadline does not hold up the others: its reply is
// handed back at once, delayed until the reset (one delivery spent: a pull
// cannot pick replies by workspace), and the others are posted.
func TestDrainHandsBackBudgetBlockedReplyAndPostsOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(20, time.Minute))
	a := e.clients[e.a.ID]
	e.clients[e.b.ID] = e.client(t, e.b) // B has a bucket of its own
	for {
		if _, err := a.State(fixture(t)); err != nil {
			t.Fatal(err)
		}
		if a.RateLimit().Remaining <= 5 {
			break
		}
	}
	e.publish(t, e.canvasReply("act-a", "reply to A"))
	toB := e.canvasReply("act-b", "reply to B")
	toB.WorkspaceID = e.b.ID
	e.publish(t, toB)
	r := e.replier(t, e.js, e.topo, replier.Config{Config: stage.Config{StartMargin: 100 * time.Millisecond}, RateReserve: 5})

	deadline := replier.MinA2ATimeout + replier.A2AGrace + 2*time.Second
	inv, cancel := context.WithTimeout(bg(t), deadline)
	defer cancel()
	start := time.Now()
	st, err := r.Drain(inv, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if st.Received != 2 || st.Notified != 1 || st.Deferred != 1 || took > 3*time.Second {
		t.Fatalf("drain took %s (deadline %s), stats %+v; want B's reply posted and A's handed back at once", took.Round(time.Millisecond), deadline, st)
	}
	if nA, nB := len(e.plat.Notifications(e.a.ID)), len(e.plat.Notifications(e.b.ID)); nA != 0 || nB != 1 {
		t.Fatalf("notifications: A %d, B %d; want 0 and 1", nA, nB)
	}
	// A's reply comes back only after its window resets, not to the next drain.
	st, err = r.Drain(bg(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Received != 0 {
		t.Fatalf("next drain: %+v; want A's reply still delayed until the reset", st)
	}
}
