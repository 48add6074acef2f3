package poller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// env is one test's world: an embedded NATS with the topology, a platform
// double and one external workspace on it.
type env struct {
	t    *testing.T
	ns   *natstest.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	topo *events.Topology
	plat *moleculetest.Server
	ws   moleculetest.Workspace
}

func newEnv(t *testing.T, opts ...moleculetest.Option) *env {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := natstest.Connect(t, ns.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, events.TopologyConfig{})
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	plat := moleculetest.NewServer(opts...)
	t.Cleanup(plat.Close)
	return &env{t: t, ns: ns, nc: nc, js: js, topo: topo, plat: plat, ws: plat.CreateWorkspace("agent-a")}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// client returns a real platform client for ws; mod adjusts its config.
func (e *env) client(ws moleculetest.Workspace, mod ...func(*molecule.Config)) *molecule.Client {
	e.t.Helper()
	cfg := molecule.Config{PlatformURL: e.plat.URL(), WorkspaceID: ws.ID, Token: ws.Token, Logger: quietLogger()}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := molecule.New(cfg)
	if err != nil {
		e.t.Fatalf("client: %v", err)
	}
	return c
}

// poller builds a poller with short test intervals; cfg.Workspaces
// defaults to the env's workspace.
func (e *env) poller(cfg poller.Config) *poller.Poller {
	e.t.Helper()
	if cfg.Workspaces == nil {
		cfg.Workspaces = []*molecule.Client{e.client(e.ws)}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	p, err := poller.New(e.js, e.topo, cfg)
	if err != nil {
		e.t.Fatalf("poller.New: %v", err)
	}
	return p
}

func (e *env) runOnce(p *poller.Poller) poller.WorkspaceResult {
	e.t.Helper()
	res, err := p.RunOnce(ctx(e.t))
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	if err := res.Err(); err != nil {
		e.t.Fatalf("RunOnce result: %v", err)
	}
	return res.Workspaces[0]
}

// register registers ws in poll mode outside any poller, so messages can
// be queued before a poller first runs.
func (e *env) register(ws moleculetest.Workspace) {
	e.t.Helper()
	if _, err := e.client(ws).Register(ctx(e.t), molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
		e.t.Fatalf("register: %v", err)
	}
}

func (e *env) sendCanvas(to, text string) {
	e.t.Helper()
	st, body, err := e.plat.SendCanvas(ctx(e.t), to, text)
	if err != nil || st != 200 {
		e.t.Fatalf("send canvas: %d %s %v", st, body, err)
	}
}

// sendConcurrently sends senders×each canvas messages "s<sender>-m<i>"
// to the env's workspace from senders goroutines at once (the platform's
// late commits come from concurrent senders, docs/protocol.md §4), calls
// sent after each one's send, if set, and returns when all were sent.
func (e *env) sendConcurrently(senders, each int, sent func(text string)) {
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				text := fmt.Sprintf("s%d-m%d", s, i)
				e.sendCanvas(e.ws.ID, text)
				if sent != nil {
					sent(text)
				}
			}
		}()
	}
	wg.Wait()
}

// inbound reads every envelope in the inbound stream, in stream order.
func (e *env) inbound() []*events.Inbound {
	e.t.Helper()
	return readStream(e.t, e.topo.Inbound, func(b []byte) (*events.Inbound, error) { return events.DecodeInbound(b) })
}

func readStream[T any](t *testing.T, s jetstream.Stream, dec func([]byte) (T, error)) []T {
	t.Helper()
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	var out []T
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx(t), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get msg %d: %v", seq, err)
		}
		v, err := dec(m.Data)
		if err != nil {
			t.Fatalf("decode msg %d: %v", seq, err)
		}
		out = append(out, v)
	}
	return out
}

func streamCount(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// feedRow is the part of a platform row the tests look at.
type feedRow struct {
	ID     string `json:"id"`
	Method string `json:"method"`
}

// messageRowIDs are the ids of the inbound message rows on the double's
// feed (own notifies and uploads excluded), oldest first.
func (e *env) messageRowIDs(ws string) []string {
	e.t.Helper()
	var ids []string
	for _, raw := range e.plat.Rows(ws) {
		var r feedRow
		if err := json.Unmarshal(raw, &r); err != nil {
			e.t.Fatalf("row: %v", err)
		}
		if r.Method != "notify" && r.Method != "chat_upload_receive" {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// requests counts the double's recorded requests with method and a path
// containing part.
func (e *env) requests(method, part string) int {
	n := 0
	for _, r := range e.plat.Requests() {
		if (method == "" || r.Method == method) && strings.Contains(r.Path, part) {
			n++
		}
	}
	return n
}

// assertExactlyOnce checks that the inbound stream holds each id once and
// nothing else.
func assertExactlyOnce(t *testing.T, got []*events.Inbound, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ActivityID]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("activity %s published %d times, want 1", id, seen[id])
		}
		delete(seen, id)
	}
	for id, n := range seen {
		t.Errorf("unexpected activity %s published %d times", id, n)
	}
}

// run starts p.Run in the background; the returned function cancels it and
// returns Run's error.
func run(t *testing.T, p *poller.Poller) (stop func() error) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(c) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("Run did not return within 10s of cancel")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitSeeded waits until a running poller registered ws and seeded its
// cursor, so later messages are new ones.
func (e *env) waitSeeded(ws string) {
	e.t.Helper()
	waitFor(e.t, 10*time.Second, "workspace registered and cursor seeded", func() bool {
		if e.plat.Status(ws).DeliveryMode != "poll" {
			return false
		}
		_, err := e.topo.Cursors.Get(ctx(e.t), ws)
		return err == nil
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
