package console_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A workspace added through the console's HTTP endpoint (signed in, with
// the CSRF token) of a running connect Runtime that follows the registry
// is polled within 2 s and its message answered; paused through the
// console, it is no longer polled 2 s later and a message sent then is
// not answered. Neither the answers nor the relay's log carry its token.
func TestConsoleChangesReachTheRunningRelay(t *testing.T) {
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ns := natstest.Start(t)
	_, keyB64, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const consoleToken = "console-e2e-token"
	logs := &syncBuffer{}
	_, url := runRelayWithConsole(t, consoleToken, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		"MOLECULE_WORKSPACE_REGISTRY=true", "MOLECULE_REGISTRY_KEY="+keyB64,
		"MOLECULE_PLATFORM_URL="+plat.URL(), "MOLECULE_HANDLER=echo", "NATS_URL="+ns.ClientURL(),
		"MOLECULE_POLL_INTERVAL=200ms")

	f := &fixture{url: strings.TrimSuffix(url, "/")}
	c := browserClient(t)
	csrf := f.login(t, c, consoleToken)
	post := func(path string, body any) time.Time {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, out := f.do(t, c, "POST", path, string(b), "X-CSRF-Token", csrf)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		return time.Now()
	}
	ws := plat.CreateWorkspace("added-from-the-console")
	// polls are the platform's activity reads with the workspace's token
	// (the poll and the cold start), after t.
	polls := func(after time.Time) int {
		n := 0
		for _, r := range plat.Requests() {
			if r.Method == "GET" && strings.HasSuffix(r.Path, "/workspaces/"+ws.ID+"/activity") &&
				r.Header.Get("Authorization") == "Bearer "+ws.Token && r.At.After(after) {
				n++
			}
		}
		return n
	}
	requests := func(after time.Time) int {
		n := 0
		for _, r := range plat.Requests() {
			if r.Header.Get("Authorization") == "Bearer "+ws.Token && r.At.After(after) {
				n++
			}
		}
		return n
	}

	t0 := time.Now()
	post("/api/workspaces/add", map[string]string{"id": ws.ID, "platform_url": plat.URL(), "token": ws.Token})
	pipelinetest.Eventually(t, 5*time.Second, "a poll of the added workspace", func() bool { return polls(t0) > 0 })
	var first time.Time
	for _, r := range plat.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+ws.Token && (first.IsZero() || r.At.Before(first)) {
			first = r.At
		}
	}
	t.Logf("console add → the workspace's first platform request: %s", first.Sub(t0).Round(time.Millisecond))
	if first.Sub(t0) > 2*time.Second {
		t.Errorf("the added workspace was first polled %s after the add, want within 2 s", first.Sub(t0))
	}
	if st, body, err := plat.SendCanvas(context.Background(), ws.ID, "hello from the console's workspace"); err != nil || (st != 200 && st != 202) {
		t.Fatalf("send: %d %s %v", st, body, err)
	}
	pipelinetest.Eventually(t, 10*time.Second, "the message answered", func() bool {
		for _, n := range plat.Notifications(ws.ID) {
			if strings.Contains(n.Message, "hello from the console's workspace") {
				return true
			}
		}
		return false
	})

	paused := post("/api/workspaces/pause", map[string]string{"id": ws.ID})
	time.Sleep(2 * time.Second) // the bound under test: nothing may reach the platform after it
	cutoff := time.Now()
	if st, body, err := plat.SendCanvas(context.Background(), ws.ID, "after the pause"); err != nil || (st != 200 && st != 202) {
		t.Fatalf("send: %d %s %v", st, body, err)
	}
	time.Sleep(time.Second) // five poll intervals: a live poller would read the feed in them
	if n := requests(cutoff); n != 0 {
		t.Errorf("%d platform request(s) with the workspace's token more than 2 s after the pause", n)
	}
	for _, n := range plat.Notifications(ws.ID) {
		if strings.Contains(n.Message, "after the pause") {
			t.Errorf("a message sent after the pause was answered")
		}
	}
	var last time.Time
	for _, r := range plat.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+ws.Token && r.At.After(last) {
			last = r.At
		}
	}
	t.Logf("console pause → the workspace's last platform request: %s (0: none after the pause was answered)", max(0, last.Sub(paused)).Round(time.Millisecond))
	if strings.Contains(logs.String(), ws.Token) {
		t.Errorf("the relay's log (debug level) holds the workspace's token")
	}
}
