package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A burst of one peer's messages without hop count (the loop guard's
// peer streak counts each in one key), handled concurrently, is handled
// on each message's first delivery: the streak's updates do not race on
// the key until some give up and are redelivered (issue 38: the echo
// bench's per-message CPU after the s43-peers merge).
func TestPeerBurstIsHandledOnItsFirstDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	const n = 64
	for i := range n {
		in := inbound(i)
		in.Source, in.SourceWorkspaceID = events.SourcePeerAgent, peer
		in.Method, in.MessageID = "message/send", fmt.Sprintf("their-msg-%d", i)
		e.publish(t, in)
	}
	var c calls
	d := newDispatcher(t, e.js, e.topo, echo(&c), dispatcher.Config{Config: stage.Config{Concurrency: n}})
	st, err := d.Drain(ctx(t), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Handled != n || st.Replied != n {
		t.Fatalf("handled %d, replied %d; want %d each (stats %+v)", st.Handled, st.Replied, n, st)
	}
	for i := range n {
		act := inbound(i).ActivityID
		if got := c.of(act); len(got) != 1 || got[0] != 1 {
			t.Errorf("%s handled on deliveries %v, want [1]", act, got)
		}
	}
}
