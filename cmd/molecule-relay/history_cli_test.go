package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// `history show` lists a workspace's conversations and prints one's
// turns; `history forget` erases one, then all of them.
func TestHistoryShowAndForget(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("memory-agent")
	nats := natstest.Start(t)
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_URL=" + nats.ClientURL()}
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	for _, text := range []string{"one", "two"} {
		if code, body, err := srv.SendCanvas(context.Background(), ws.ID, text); err != nil || code != 200 {
			t.Fatalf("send: %d %s %v", code, body, err)
		}
	}
	if r := runCLI(t, environ, "connect", "--once", "--idle", "200ms"); r.code != exitOK {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	// A second conversation, written as a replier would.
	_, js := natstest.Connect(t, nats.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := memory.New(js, topo, memory.Config{Turns: 20})
	if _, err := mem.Record(ctx, ws.ID, "peer-p1", handler.Turn{Role: handler.RoleUser, Text: "from a peer", ActivityID: "x"}); err != nil {
		t.Fatal(err)
	}

	list := runCLI(t, environ, "history", "show", ws.ID)
	if list.code != exitOK || !strings.Contains(list.stdout, "canvas") || !strings.Contains(list.stdout, "peer-p1") {
		t.Fatalf("history show ws: %d\n%s\n%s", list.code, list.stdout, list.stderr)
	}
	show := runCLI(t, environ, "history", "show", ws.ID, "canvas")
	for _, want := range []string{"user  one", "agent echo: one", "user  two", "agent echo: two"} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("history show ws canvas lacks %q:\n%s%s", want, show.stdout, show.stderr)
		}
	}
	asJSON := runCLI(t, environ, "history", "show", ws.ID, "canvas", "--json")
	var turns []handler.Turn
	if err := json.Unmarshal([]byte(asJSON.stdout), &turns); err != nil || len(turns) != 4 {
		t.Fatalf("history show --json: %d turns (%v)\n%s", len(turns), err, asJSON.stdout)
	}

	if f := runCLI(t, environ, "history", "forget", ws.ID, "canvas"); f.code != exitOK || !strings.Contains(f.stdout, "forgot 1 conversation(s)") {
		t.Fatalf("forget canvas: %d\n%s\n%s", f.code, f.stdout, f.stderr)
	}
	if gone := runCLI(t, environ, "history", "show", ws.ID, "canvas"); gone.code != exitFailed || !strings.Contains(gone.stderr, "no conversation") {
		t.Errorf("show after forget: %d\n%s\n%s", gone.code, gone.stdout, gone.stderr)
	}
	if f := runCLI(t, environ, "history", "forget", ws.ID); f.code != exitOK || !strings.Contains(f.stdout, "forgot 1 conversation(s)") || !strings.Contains(f.stdout, "peer-p1") {
		t.Fatalf("forget all: %d\n%s\n%s", f.code, f.stdout, f.stderr)
	}
	if empty := runCLI(t, environ, "history", "show", ws.ID); empty.code != exitOK || !strings.Contains(empty.stdout, "no conversations") {
		t.Errorf("show after forgetting all: %d\n%s", empty.code, empty.stdout)
	}
}

func TestHistoryUsageErrorsExit2(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{{"history"}, {"history", "show"}, {"history", "frob", "ws"}, {"history", "show", "bad.id"}, {"history", "show", "--json"}} {
		if r := runCLI(t, nil, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
	}
}
