package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
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

// A peer's message counted by another process and not yet answered
// there makes the next one a burst (a streak of 1), even in a process
// that remembers an answered turn of that streak: what it reads again
// replaces what it remembered.
func TestPeerBurstAcrossProcessesIsNoPingPong(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	_, js2, topo2 := e.conn(t)
	cfg := dispatcher.Config{PeerStreak: 2, PeerStreakGap: time.Minute}
	started, release := make(chan struct{}), make(chan struct{})
	slow := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		close(started)
		<-release
		return "later", nil
	})
	a := newDispatcher(t, e.js, e.topo, echo(nil), cfg)
	one := cfg
	one.Concurrency = 1 // busy with the second message: the third is a's
	b := newDispatcher(t, js2, topo2, slow, one)
	send := func(i int) events.Inbound {
		in := inbound(i)
		in.Source, in.SourceWorkspaceID = events.SourcePeerAgent, peer
		in.Method, in.MessageID = "message/send", fmt.Sprintf("their-msg-%d", i)
		e.publish(t, in)
		return in
	}
	send(0)
	if _, err := a.Drain(ctx(t), 200*time.Millisecond); err != nil { // turn 1, answered: a remembers it
		t.Fatal(err)
	}
	send(1)
	bDone := make(chan error, 1)
	go func() { _, err := b.Drain(ctx(t), 200*time.Millisecond); bDone <- err }()
	<-started // b counted turn 2 and has not answered it
	third := send(2)
	if st, err := a.Drain(ctx(t), 200*time.Millisecond); err != nil || st.Handled != 1 {
		t.Fatalf("a handled %d of the third message, want 1 (%v)", st.Handled, err)
	}
	close(release)
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	entry, err := e.topo.Handled.Get(ctx(t), events.HandledKey(ws, third.ActivityID))
	if err != nil {
		t.Fatalf("third message: handled record: %v", err)
	}
	var rec events.HandledRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != events.OutcomeReplied {
		t.Fatalf("third message: outcome %q, want %q (sent before the second was answered: a burst, not a third turn)", rec.Outcome, events.OutcomeReplied)
	}
}
