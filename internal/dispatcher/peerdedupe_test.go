package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
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

// The claim a message's own create-only write made is not read back: only
// a claim that existed before (another row's, an earlier delivery's) is.
func TestPeerClaimMadeByThisWriteIsNotReadBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	nc, _ := natstest.Connect(t, e.srv.ClientURL())
	// A channel subscription is filled by the connection's read loop, so
	// after a flush it holds every read the server routed before it.
	reads := make(chan *nats.Msg, 64)
	claims := "$JS.API.DIRECT.GET.KV_" + events.BucketHandled + ".$KV." + events.BucketHandled + "." + ws + ".msg.>"
	sub, err := nc.ChanSubscribe(claims, reads)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	first, again := inbound(1), inbound(2)
	for _, in := range []*events.Inbound{&first, &again} {
		in.Source, in.SourceWorkspaceID, in.MessageID, in.Hops = events.SourcePeerAgent, peer, "m-1", 1
	}
	d := newDispatcher(t, e.js, e.topo, handler.Func(func(context.Context, *handler.Request) (string, error) { return "", nil }), dispatcher.Config{})
	e.publish(t, first)
	if _, err := d.Drain(ctx(t), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(reads); n != 0 {
		t.Errorf("the claim was read %d times after its own write made it, want 0", n)
	}
	// Same sender and messageId, another row: the claim exists and is
	// read (by the failed create-only write inside nats.go, and by us).
	e.publish(t, again)
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.PeerDuplicates != 1 {
		t.Errorf("stats %+v; want the second row a duplicate of the first", st)
	}
}
