package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// dlq show and dlq list --json print why a message failed and where it
// came from, not what it said: the message itself (text, and the stored
// bytes that hold it) only with --show-body. replay works the same either
// way.
func TestDLQWithholdsMessageBodyUnlessShowBody(t *testing.T) {
	nats := natstest.Start(t)
	environ := []string{"NATS_URL=" + nats.ClientURL()}
	if r := runCLI(t, environ, "dlq", "list"); r.code != exitOK { // creates the topology
		t.Fatalf("dlq list: %d %s", r.code, r.stderr)
	}
	const ws, secret = "35637291-d55e-4553-896c-13c2e02fe4f7", "my bank PIN is 4711"
	envelope, _ := json.Marshal(map[string]any{"v": 1, "workspace_id": ws, "activity_id": "act-1", "source": "canvas_user", "text": secret})
	_, js := natstest.Connect(t, nats.ClientURL())
	if err := dlq.Publish(context.Background(), js, events.DeadLetter{Stage: events.StageDispatcher, WorkspaceID: ws, ActivityID: "act-1",
		Reason: events.ReasonPermanent, Error: "handler: exit status 65", Deliveries: 1, OriginalSubject: events.InboundSubject(ws),
		Envelope: envelope}); err != nil {
		t.Fatal(err)
	}

	list := runCLI(t, environ, "dlq", "list", "--json")
	var entries []dlq.Entry
	if err := json.Unmarshal([]byte(list.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("dlq list --json: %s %v", list.stdout, err)
	}
	seq := jsonNum(entries[0].Seq)
	show := runCLI(t, environ, "dlq", "show", seq)
	for name, r := range map[string]result{"list --json": list, "show": show} {
		if r.code != exitOK || strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, `"raw":`) ||
			!strings.Contains(r.stdout, "act-1") || !strings.Contains(r.stdout, "exit status 65") || !strings.Contains(r.stdout, "envelope.text") {
			t.Errorf("dlq %s: exit %d\n%s", name, r.code, r.stdout)
		}
	}
	if !strings.Contains(show.stderr, "--show-body") {
		t.Errorf("dlq show does not say how to see the message: %s", show.stderr)
	}

	for _, args := range [][]string{{"show", seq, "--show-body"}, {"list", "--json", "--show-body"}} {
		if r := runCLI(t, environ, append([]string{"dlq"}, args...)...); r.code != exitOK || !strings.Contains(r.stdout, secret) {
			t.Errorf("dlq %v: exit %d\n%s", args, r.code, r.stdout)
		}
	}
	if r := runCLI(t, environ, "dlq", "list"); r.code != exitOK || strings.Contains(r.stdout, secret) || !strings.Contains(r.stdout, "act-1") {
		t.Errorf("dlq list: exit %d\n%s", r.code, r.stdout)
	}
	if r := runCLI(t, environ, "dlq", "replay", seq); r.code != exitOK {
		t.Fatalf("dlq replay: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, environ, "dlq", "list", "--json"); r.code != exitOK || strings.TrimSpace(r.stdout) != "null" {
		t.Errorf("after replay: exit %d %s", r.code, r.stdout)
	}
}
