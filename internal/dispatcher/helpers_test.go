package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// env is one embedded NATS server with the topology, for one test.
type env struct {
	srv  *natstest.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	topo *events.Topology
	tc   events.TopologyConfig
}

func newEnv(t *testing.T, tc events.TopologyConfig) *env {
	t.Helper()
	if tc.DispatcherAckWait == 0 {
		tc.DispatcherAckWait = time.Second
	}
	tc.Storage = jetstream.MemoryStorage
	srv := natstest.Start(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, tc)
	if err != nil {
		t.Fatalf("EnsureTopology: %v", err)
	}
	return &env{srv: srv, nc: nc, js: js, topo: topo, tc: tc}
}

// conn opens a second, independent connection (another "process") and its
// own topology handles.
func (e *env) conn(t *testing.T) (*nats.Conn, jetstream.JetStream, *events.Topology) {
	t.Helper()
	nc, js := natstest.Connect(t, e.srv.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, e.tc)
	if err != nil {
		t.Fatalf("EnsureTopology: %v", err)
	}
	return nc, js, topo
}

// ctx has no deadline: a deadline would engage the dispatcher's
// start-margin rule (no handler starts unless HandlerTimeout fits).
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

const ws = "35637291-d55e-4553-896c-13c2e02fe4f7"
const peer = "b48f61e0-0000-4000-8000-000000000001"

func inbound(i int) events.Inbound {
	return events.Inbound{
		WorkspaceID: ws,
		ActivityID:  fmt.Sprintf("act-%04d", i),
		Source:      events.SourceCanvasUser,
		Text:        fmt.Sprintf("hello %d", i),
		CreatedAt:   time.Now().UTC(),
		PolledAt:    time.Now().UTC(),
	}
}

func (e *env) publish(t *testing.T, in events.Inbound) {
	t.Helper()
	data, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, events.InboundSubject(in.WorkspaceID), data, events.InboundMsgID(in.WorkspaceID, in.ActivityID))
}

func (e *env) publishRaw(t *testing.T, subject string, data []byte, id string) {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	if _, err := e.js.PublishMsg(ctx(t), m); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// replies returns every reply stored in the reply stream (no replier runs
// in these tests), with each message's Nats-Msg-Id.
func (e *env) replies(t *testing.T) ([]events.Reply, []string) {
	t.Helper()
	var out []events.Reply
	var ids []string
	for seq := uint64(1); ; {
		m, err := e.topo.Reply.GetMsg(ctx(t), seq, jetstream.WithGetMsgSubject(events.SubjectReplyPrefix+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, ids
		}
		if err != nil {
			t.Fatalf("read reply stream: %v", err)
		}
		r, err := events.DecodeReply(m.Data)
		if err != nil {
			t.Fatalf("decode reply %d: %v", m.Sequence, err)
		}
		out = append(out, *r)
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
		seq = m.Sequence + 1
	}
}

// inboundLeft is how many messages the inbound stream still holds once the
// acks sent so far had time to land (5 s at most). The dispatcher's acks are
// not confirmed by default (stage.Config.ConfirmAcks), so its stats can
// count a message finished a moment before the server removes it: every
// caller expects 0, so it waits for that rather than read once.
func (e *env) inboundLeft(t *testing.T) uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := e.topo.Inbound.Info(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 || time.Now().After(deadline) {
			return info.State.Msgs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) deadLetters(t *testing.T) []dlq.Entry {
	t.Helper()
	entries, err := dlq.List(ctx(t), e.js, dlq.Filter{})
	if err != nil {
		t.Fatalf("dlq.List: %v", err)
	}
	return entries
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// calls records handler invocations.
type calls struct {
	mu         sync.Mutex
	deliveries map[string][]uint64
}

func (c *calls) add(act string, delivery uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deliveries == nil {
		c.deliveries = map[string][]uint64{}
	}
	c.deliveries[act] = append(c.deliveries[act], delivery)
}

func (c *calls) of(act string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.deliveries[act]...)
}

func (c *calls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.deliveries {
		n += len(d)
	}
	return n
}
