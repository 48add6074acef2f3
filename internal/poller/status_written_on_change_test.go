package poller_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A poll cycle or a heartbeat that learns nothing new writes no status
// record: the stored poll and heartbeat times are refreshed once a minute,
// not every cycle (a thousand workspaces polling every 5 s wrote 200
// records a second to say nothing).
func TestUneventfulCyclesWriteNoStatusRecord(t *testing.T) {
	e := newEnv(t, moleculetest.WithRateLimit(0, 0))
	run(t, e.poller(poller.Config{PollInterval: 20 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond}))
	e.waitSeeded(e.ws.ID)
	waitFor(t, 10*time.Second, "a heartbeat recorded", func() bool {
		st, err := poller.ReadStatus(ctx(t), e.topo, e.ws.ID)
		return err == nil && st[0].HeartbeatStatus != "" && !st[0].LastPollAt.IsZero()
	})
	entry, err := e.topo.Status.Get(ctx(t), e.ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	polls := e.requests("GET", "/workspaces/"+e.ws.ID+"/activity")
	beats := e.requests("POST", "/registry/heartbeat")
	from := time.Now()
	waitFor(t, 10*time.Second, "a second of polls and heartbeats", func() bool { return time.Since(from) > time.Second })
	polls = e.requests("GET", "/workspaces/"+e.ws.ID+"/activity") - polls
	beats = e.requests("POST", "/registry/heartbeat") - beats
	after, err := e.topo.Status.Get(ctx(t), e.ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	if polls < 10 || beats < 3 {
		t.Fatalf("only %d polls and %d heartbeats in a second", polls, beats)
	}
	if after.Revision() != entry.Revision() {
		t.Fatalf("the status record was rewritten (revision %d → %d) by %d uneventful polls and %d heartbeats", entry.Revision(), after.Revision(), polls, beats)
	}

	// Something new is still written at once.
	e.plat.Pause(e.ws.ID)
	waitFor(t, 10*time.Second, "the pause recorded", func() bool {
		st, err := poller.ReadStatus(ctx(t), e.topo, e.ws.ID)
		return err == nil && st[0].Paused
	})
}
