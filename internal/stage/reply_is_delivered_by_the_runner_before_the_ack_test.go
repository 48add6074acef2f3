package stage_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// neverPosts is a reply delivery that fails the test if the runner hands
// it a reply: the one under test must go through the stream.
type neverPosts struct{ t *testing.T }

func (n neverPosts) DirectPostDeadline(now time.Time) time.Time { return now.Add(time.Second) }
func (n neverPosts) PostDirect(context.Context, []byte, events.PostingMark, func()) (stage.Outcome, bool) {
	n.t.Error("a peer's reply was posted directly: it must go through the reply stream")
	return stage.Abandon(), false
}
func (n neverPosts) DeadLetterDirect(context.Context, string, string, []byte, events.Refusal) error {
	n.t.Error("DeadLetterDirect called without a refusal")
	return nil
}

// A step's reply (stage.Deliver) is delivered by the runner: published to
// the reply stream with its activity's Nats-Msg-Id, then the step's
// Delivered runs and the message is acked. A peer's reply is never posted
// directly, even when the runner has a reply delivery (stage.Config.Direct),
// and it gets no posting mark.
func TestReplyIsDeliveredByTheRunnerBeforeTheAck(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "no direct post", true: "a peer's reply with direct post"}[direct], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, events.TopologyConfig{})
			e.publish(t, 1)
			in := &events.Inbound{WorkspaceID: ws, ActivityID: "act-1", Source: events.SourceCanvasUser}
			cfg := stage.Config{FetchWait: 100 * time.Millisecond}
			if direct {
				in.Source, in.SourceWorkspaceID = events.SourcePeerAgent, "peer"
				cfg.Direct = neverPosts{t}
			}
			var published, delivered atomic.Int32
			cfg.OnReply = func() { published.Add(1) }
			var r *stage.Runner
			r, err := stage.Open(e.js, e.target(), &cfg, 0, 0, nil, func(ctx context.Context, d *stage.Delivery) stage.Outcome {
				rec := events.HandledRecord{Outcome: events.OutcomeReplied, Reply: []byte(`{"text":"hi"}`)}
				r.MarkDirect(&rec, d, in, time.Now())
				if !rec.Mark().IsZero() {
					t.Error("the record of a reply not posted directly carries a posting mark")
				}
				key := events.HandledKey(ws, in.ActivityID)
				rev, err := e.topo.Handled.Create(ctx, key, []byte(`{}`))
				if err != nil {
					t.Error(err)
					return stage.Retry(0)
				}
				return stage.Deliver(stage.Reply{In: in, Record: rec, Rev: rev, Handled: e.topo.Handled, Key: key,
					Delivered: func(context.Context) {
						if published.Load() != 1 {
							t.Error("Delivered called before the reply was published")
						}
						delivered.Add(1)
					}})
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Drain(ctx(t), 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if delivered.Load() != 1 {
				t.Errorf("Delivered called %d times, want 1", delivered.Load())
			}
			if n := e.left(t); n != 0 {
				t.Errorf("%d inbound messages left unacked", n)
			}
			msg, err := e.topo.Reply.GetLastMsgForSubject(ctx(t), events.ReplySubject(ws))
			if err != nil {
				t.Fatalf("no reply on the reply stream: %v", err)
			}
			if string(msg.Data) != `{"text":"hi"}` || msg.Header.Get("Nats-Msg-Id") != events.ReplyMsgID(ws, in.ActivityID) {
				t.Errorf("reply published as %q with id %q", msg.Data, msg.Header.Get("Nats-Msg-Id"))
			}
		})
	}
}
