//go:build !lambda.norpc

package relay_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
)

// A Go program mounts the relay's console on its own server: the console
// asks for MOLECULE_CONSOLE_TOKEN and, with it, lists the workspace.
func TestConsoleMountsInAGoProgram(t *testing.T) {
	platform, ws, settings, done := sandbox()
	defer done()
	r, err := relay.New(context.Background(), nil, append(settings, relay.Platform(platform.URL()),
		relay.Workspace(ws.ID, ws.Token), relay.Setting("MOLECULE_HANDLER", "echo"),
		relay.Setting("MOLECULE_CONSOLE_TOKEN", "tok"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }() // the poller writes the workspace's status the console reads
	h, err := r.Console()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/ops", h))
	defer srv.Close()
	if resp, err := http.Get(srv.URL + "/ops/api/overview"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %v %v, want 401", resp, err)
	}
	overview := func() (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/ops/api/overview", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := overview()
		if code == http.StatusOK && strings.Contains(body, ws.ID) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the token: %d %s, want 200 naming %s", code, body, ws.ID)
		}
	}
}
