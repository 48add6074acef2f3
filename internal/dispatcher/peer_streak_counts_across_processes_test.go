package dispatcher_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A peer's ping-pong handled by two dispatcher processes in turn is one
// streak: a process whose last view of the streak is stale (the other
// wrote since) reads it again instead of counting from its own memory,
// so the turn after PeerStreak is not handled.
func TestPeerStreakCountsAcrossProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	_, js2, topo2 := e.conn(t)
	cfg := dispatcher.Config{PeerStreak: 2, PeerStreakGap: time.Minute}
	procs := []*dispatcher.Dispatcher{
		newDispatcher(t, e.js, e.topo, echo(nil), cfg),
		newDispatcher(t, js2, topo2, echo(nil), cfg),
	}
	var outcomes []string
	for i, d := range []int{0, 1, 0} { // the third turn on the first process again
		in := inbound(i)
		in.Source, in.SourceWorkspaceID = events.SourcePeerAgent, peer
		in.Method, in.MessageID = "message/send", fmt.Sprintf("their-msg-%d", i)
		in.CreatedAt = time.Now().UTC()
		in.PolledAt = in.CreatedAt
		e.publish(t, in)
		if _, err := procs[d].Drain(ctx(t), 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		entry, err := e.topo.Handled.Get(ctx(t), events.HandledKey(ws, in.ActivityID))
		if err != nil {
			t.Fatalf("turn %d: handled record: %v", i+1, err)
		}
		var rec events.HandledRecord
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		outcomes = append(outcomes, rec.Outcome)
	}
	want := []string{events.OutcomeReplied, events.OutcomeReplied, events.OutcomeSuppressed}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v (PeerStreak 2 over two processes)", outcomes, want)
	}
}
