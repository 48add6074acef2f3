package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/dispatcher"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/handler"
	"github.com/molecule-ai/molecule-relay/pkg/stage"
)

// A peer message is de-duplicated on the sender's messageId, scoped to the
// sender: a second activity row with the same sender and messageId (a
// sender that posted twice) does not run the handler; the same messageId
// from another sender, or from a canvas user, does. The claiming row's own
// redelivery (its handler failed once) still runs.
func TestPeerMessageIDDeduplicated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	const other = "c0ffee00-0000-4000-8000-000000000002"
	msg := func(i int, source events.Source, sender, messageID string) events.Inbound {
		in := inbound(i)
		in.Source, in.SourceWorkspaceID, in.MessageID, in.Hops = source, sender, messageID, 1
		return in
	}
	msgs := []events.Inbound{
		msg(1, events.SourcePeerAgent, peer, "m-1"),       // first: runs (fails once, redelivered)
		msg(2, events.SourcePeerAgent, peer, "m-1"),       // same sender, same id: duplicate
		msg(3, events.SourcePeerAgent, other, "m-1"),      // another sender: runs
		msg(4, events.SourceCanvasUser, "", "m-1"),        // canvas: not de-duplicated
		msg(5, events.SourcePeerAgent, peer, "m-2"),       // another id: runs
		msg(6, events.SourcePeerAgent, peer, "m.1 weird"), // any characters: runs
	}
	var c calls
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		c.add(req.Message.ActivityID, req.Delivery)
		if req.Message.ActivityID == "act-0001" && req.Delivery == 1 {
			return "", errors.New("upstream busy")
		}
		return "", nil
	})
	d := newDispatcher(t, e.js, e.topo, h, dispatcher.Config{Config: stage.Config{RetryBase: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}})
	// The first message is handled (and fails once) before the others
	// arrive, so it owns the claim.
	e.publish(t, msgs[0])
	if _, err := d.Drain(ctx(t), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, in := range msgs[1:] {
		e.publish(t, in)
	}
	st, err := d.Drain(ctx(t), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"act-0001": "[1 2]", "act-0002": "[]", "act-0003": "[1]", "act-0004": "[1]", "act-0005": "[1]", "act-0006": "[1]"}
	for act, w := range want {
		if got := fmt.Sprint(c.of(act)); got != w {
			t.Errorf("%s: handler deliveries %s, want %s", act, got, w)
		}
	}
	if st.PeerDuplicates != 1 || e.inboundLeft(t) != 0 {
		t.Fatalf("stats = %+v, inbound left %d; want one peer duplicate acked", st, e.inboundLeft(t))
	}
}
