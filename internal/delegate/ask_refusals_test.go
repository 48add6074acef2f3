package delegate_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Questions that cannot be asked are refused with a clear error before
// anything is recorded or sent, and a re-run whose n-th question goes to
// another peer than the first run's is refused instead of being handed the
// other question's answer.
func TestAskRefusesWhatCannotBeAsked(t *testing.T) {
	t.Parallel()
	ctx, topo := bareTopology(t)
	const ws = "ws-a"
	// The platform URL is never reached: every case fails before a send.
	c, err := molecule.New(molecule.Config{PlatformURL: "http://127.0.0.1:9", WorkspaceID: ws, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := delegate.New(delegate.Config{Asks: topo.Asks, Clients: map[string]*molecule.Client{ws: c}})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(events.AskRecord{State: events.AskPending, Workspace: ws, Peer: "ws-b", Activity: "act", MessageID: delegate.MessageID(ws, "act", 1)})
	if _, err := topo.Asks.Create(ctx, events.AskKey(ws, delegate.MessageID(ws, "act", 1)), rec); err != nil {
		t.Fatal(err)
	}
	ok := delegate.Scope{Workspace: ws, Activity: "act", N: 1}
	for _, tc := range []struct {
		name string
		s    delegate.Scope
		q    handler.Question
		want error
	}{
		{"workspace not served here", delegate.Scope{Workspace: "ws-x", Activity: "act", N: 1}, handler.Question{PeerID: "ws-b", Text: "q"}, delegate.ErrInvalidQuestion},
		{"no activity", delegate.Scope{Workspace: ws, N: 1}, handler.Question{PeerID: "ws-b", Text: "q"}, delegate.ErrInvalidQuestion},
		{"no peer", ok, handler.Question{Text: "q"}, delegate.ErrInvalidQuestion},
		{"itself", ok, handler.Question{PeerID: ws, Text: "q"}, delegate.ErrInvalidQuestion},
		{"nothing to say", ok, handler.Question{PeerID: "ws-b"}, delegate.ErrInvalidQuestion},
		{"first run asked another peer", ok, handler.Question{PeerID: "ws-c", Text: "q"}, delegate.ErrMismatch},
	} {
		if _, err := a.Ask(ctx, tc.s, tc.q); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := delegate.New(delegate.Config{Clients: map[string]*molecule.Client{ws: c}}); !errors.Is(err, delegate.ErrInvalidConfig) {
		t.Errorf("New without the asks bucket: %v", err)
	}
}
