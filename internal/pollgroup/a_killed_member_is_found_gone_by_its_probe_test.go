package pollgroup_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// A member whose connection is gone (a killed process) is counted dead
// when its liveness probe finds no subscriber, after 3 missed renewals
// (TTL/4 each), not after the 8 (2 TTL) that count a member dead without
// probes: at TTL 4 s, its share moves within 5 s of the cut, where
// counting renewals alone takes at least 7 s.
func TestAKilledMemberIsFoundGoneByItsProbe(t *testing.T) {
	srv := natstest.Start(t)
	ws := workspaceIDs(40)
	tr := &tracker{by: map[string]string{}}
	const ttl = 4 * time.Second
	cuts := map[string]func(){}
	for _, id := range []string{"a", "b"} {
		nc, js := natstest.ConnectCuttable(t, srv.ClientURL())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = pollgroup.Run(ctx, js, pollgroup.Config{Group: "g1", Instance: id, Workspaces: ws, Poll: tr.poll(id), TTL: ttl})
		}()
		t.Cleanup(func() { cancel(); <-done })
		cuts[id] = nc.Close
	}
	tr.waitFor(t, "a and b share the fleet", func(s map[string]int, n int) bool { return n == len(ws) && s["a"] > 0 && s["b"] > 0 })

	cut := time.Now()
	cuts["a"]()
	tr.waitFor(t, "a's share moves to b", func(s map[string]int, n int) bool { return s["b"] == len(ws) })
	if took := time.Since(cut); took > 5*time.Second {
		t.Errorf("b took a's share %s after a's connection closed, want within 5s (probe after 3 renewals of TTL/4 = %s)", took.Round(time.Millisecond), 3*ttl/4)
	} else {
		t.Logf("b took a's share %s after the cut", took.Round(time.Millisecond))
	}
}
