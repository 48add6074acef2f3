package delegate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Answers that name none of our ids, against real buckets and two real
// questions awaited from one peer: they are paired with the questions in
// the order asked (FIFO), a redelivered answer completes the same
// question again (a duplicate), never the next one, and what cannot be
// an answer takes the ordinary path: a relay's question (it carries
// relay_hops), a contextId no awaited question was asked in, a message
// from another peer, or any message once nothing is awaited.
func TestRouteMatchesAnswersWithoutOurIDsInOrder(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 2})
	peer, other := w.Peers[0], w.Peers[1]
	topo := w.Obs.Topo
	asker := newAsker(t, w, w.Obs)
	ctx := pipelinetest.Ctx(t)

	answers := make([]chan string, 2)
	for i, act := range []string{"act-first", "act-second"} {
		answers[i] = make(chan string, 1)
		go func() {
			s := asker.Session(delegate.Scope{Workspace: w.Agent.ID, Activity: act, ContextID: "ctx-" + act})
			a, err := s.Ask(context.Background(), handler.Question{PeerID: peer.ID, Text: "q", Timeout: 30 * time.Second})
			if err != nil {
				answers[i] <- err.Error()
				return
			}
			answers[i] <- a.Text
		}()
		// One after the other: the order they are asked in is the order
		// they are answered in.
		pipelinetest.Eventually(t, 10*time.Second, act+" sent", func() bool {
			e, err := topo.Asks.Get(ctx, events.AskKey(w.Agent.ID, delegate.MessageID(w.Agent.ID, act, 1)))
			return err == nil && strings.Contains(string(e.Value()), `"sent_at"`)
		})
	}
	msg := func(activity, text string) *events.Inbound {
		return &events.Inbound{WorkspaceID: w.Agent.ID, ActivityID: activity, Source: events.SourcePeerAgent,
			SourceWorkspaceID: peer.ID, Method: "message/send", Role: "user", MessageID: "m-" + activity, Text: text}
	}
	relayQuestion := msg("row-relay", "a relay's question")
	relayQuestion.Hops = 1
	otherContext := msg("row-ctx", "another conversation")
	otherContext.ContextID = "ctx-unknown"
	fromOther := msg("row-other", "hello")
	fromOther.SourceWorkspaceID = other.ID

	for _, tc := range []struct {
		name string
		in   *events.Inbound
		want delegate.Outcome
	}{
		{"a relay's question", relayQuestion, delegate.NotAnAnswer},
		{"a contextId no question was asked in", otherContext, delegate.NotAnAnswer},
		{"from a peer nothing is awaited from", fromOther, delegate.NotAnAnswer},
		{"the first answer", msg("row-1", "first"), delegate.Stored},
		{"its redelivery", msg("row-1", "first"), delegate.Duplicate},
		{"the second answer", msg("row-2", "second"), delegate.Stored},
		{"a message once nothing is awaited", msg("row-3", "thanks"), delegate.NotAnAnswer},
	} {
		if !delegate.MayBeAnswer(topo.Asks, tc.in) && tc.want != delegate.NotAnAnswer {
			t.Errorf("%s: MayBeAnswer false", tc.name)
		}
		if got, err := delegate.Route(ctx, topo.Asks, topo.Handled, tc.in); got != tc.want || err != nil {
			t.Errorf("%s: outcome %d (err %v), want %d", tc.name, got, err, tc.want)
		}
	}
	for i, want := range []string{"first", "second"} {
		select {
		case got := <-answers[i]:
			if got != want {
				t.Errorf("question %d got %q, want %q", i+1, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("question %d not answered", i+1)
		}
	}
}

// An answer without our ids that comes while its question's POST has not
// yet returned (the record not yet marked sent: a fast peer's answer
// races the record's update) is neither matched nor handed on: Route
// says ErrInFlight, and the dispatcher retries it shortly.
func TestRouteRetriesAnAnswerRacingItsQuestionsSend(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	peer := w.Plat.CreateWorkspace("slow-push-peer")
	release := make(chan struct{})
	url := pushAgentAnswering(t, make(chan string, 4), func(q string) map[string]any {
		<-release
		return map[string]any{"kind": "message", "role": "agent", "messageId": "m", "parts": textPart("push: " + q)}
	})
	ctx := pipelinetest.Ctx(t)
	if _, err := w.Client(peer).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: url}); err != nil {
		t.Fatal(err)
	}
	asked := make(chan string, 1)
	go func() {
		s := newAsker(t, w, w.Obs).Session(delegate.Scope{Workspace: w.Agent.ID, Activity: "act"})
		a, err := s.Ask(context.Background(), handler.Question{PeerID: peer.ID, Text: "q", Timeout: 20 * time.Second})
		if err != nil {
			asked <- err.Error()
			return
		}
		asked <- a.Text
	}()
	in := &events.Inbound{WorkspaceID: w.Agent.ID, ActivityID: "row-1", Source: events.SourcePeerAgent,
		SourceWorkspaceID: peer.ID, Method: "message/send", Role: "user", MessageID: "m-1", Text: "hello"}
	pipelinetest.Eventually(t, 10*time.Second, "the question on its way", func() bool {
		_, err := delegate.Route(ctx, w.Obs.Topo.Asks, w.Obs.Topo.Handled, in)
		return errors.Is(err, delegate.ErrInFlight)
	})
	close(release)
	if got := <-asked; got != "push: q" {
		t.Errorf("ask got %q, want the push answer", got)
	}
	if got, err := delegate.Route(ctx, w.Obs.Topo.Asks, w.Obs.Topo.Handled, in); got != delegate.NotAnAnswer || err != nil {
		t.Errorf("once the question is answered: outcome %d (err %v), want not an answer", got, err)
	}
}
