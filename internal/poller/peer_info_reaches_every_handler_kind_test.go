package poller_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// TestPeerInfoReachesEveryHandlerKind: on a 2026-08 platform the poller
// reads the feed with include=peer_info (enteros-core aeec8e47
// activity.go:318-319, 635-652), so a peer's message reaches a Go handler
// (handler.Message), an exec handler's stdin, an http handler's body and
// the Claude channel's meta with the sender's name, role and agent card
// URL, and its file parts as attachments.
func TestPeerInfoReachesEveryHandlerKind(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{})
	e.runOnce(p) // registers in poll mode
	b := e.plat.CreateWorkspace("ext-B")
	e.plat.SetRole(b.ID, "reviewer")
	body := `{"jsonrpc":"2.0","id":"r1","method":"message/send","params":{"message":{"role":"user","messageId":"pi-1","parts":[` +
		`{"kind":"text","text":"please review"},{"kind":"file","file":{"uri":"workspace:spec.pdf","mime_type":"application/pdf","name":"spec.pdf"}}]}}}`
	h := http.Header{}
	h.Set("X-Workspace-ID", b.ID)
	h.Set("Authorization", "Bearer "+b.Token)
	if st, out, err := e.plat.SendRaw(ctx(t), e.ws.ID, h, []byte(body)); err != nil || st != 200 {
		t.Fatalf("send: %d %s %v", st, out, err)
	}
	e.runOnce(p)
	got := e.inbound()
	if len(got) != 1 {
		t.Fatalf("%d envelopes, want 1", len(got))
	}
	in := got[0]
	card := e.plat.URL() + "/registry/discover/" + b.ID

	// A Go handler's Message is the envelope.
	var msg *handler.Message = in
	if msg.PeerName != "ext-B" || msg.PeerRole != "reviewer" || msg.AgentCardURL != card || len(msg.Attachments) != 1 || msg.Attachments[0].Name != "spec.pdf" {
		t.Errorf("envelope: name %q role %q card %q attachments %+v", msg.PeerName, msg.PeerRole, msg.AgentCardURL, msg.Attachments)
	}

	req := &handler.Request{Message: in, Delivery: 1, Progress: func() {}}
	check := func(kind string, payload []byte) {
		t.Helper()
		var pl struct {
			Message map[string]any `json:"message"`
		}
		if err := json.Unmarshal(payload, &pl); err != nil {
			t.Fatalf("%s payload: %v\n%s", kind, err, payload)
		}
		m := pl.Message
		if m["peer_name"] != "ext-B" || m["peer_role"] != "reviewer" || m["agent_card_url"] != card || m["attachments"] == nil {
			t.Errorf("%s payload message: %v", kind, m)
		}
	}

	stdin := filepath.Join(t.TempDir(), "stdin.json")
	script := filepath.Join(t.TempDir(), "h.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat > \"$OUT\"\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	eh, err := handler.Parse("exec:"+script, handler.Options{Env: []string{"OUT=" + stdin}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eh.Handle(ctx(t), req); err != nil {
		t.Fatalf("exec: %v", err)
	}
	b1, err := os.ReadFile(stdin)
	if err != nil {
		t.Fatal(err)
	}
	check("exec", b1)

	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	hh, err := handler.Parse("http:"+srv.URL, handler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hh.Handle(ctx(t), req); err != nil {
		t.Fatalf("http: %v", err)
	}
	check("http", <-bodies)

	meta := mcpchannel.NewNotification(in).Meta
	if meta["peer_name"] != "ext-B" || meta["peer_role"] != "reviewer" || meta["agent_card_url"] != card || meta["kind"] != string(events.SourcePeerAgent) {
		t.Errorf("channel meta %v", meta)
	}
}
