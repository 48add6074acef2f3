package moleculetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// "New session" moves chat_session_started_at to now, answers it, sends
// SESSION_RESET {workspace_id, chat_session_started_at, prev_marker_set}
// on the workspace's own stream and keeps every row; GET /workspaces/:id
// does not carry the marker. enteros-core aeec8e47
// workspace-server/internal/handlers/chat_session.go:81-137, router.go:563.
func TestNewChatSessionMovesMarkerAndKeepsRows(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	if code, _, err := s.SendCanvas(context.Background(), a.ID, "before"); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	st := openSSE(t, s, a.ID, a.Token)
	st.next(t, 5*time.Second) // ": ping"

	before := time.Now().UTC()
	for i, prev := range []bool{false, true} {
		code, body, err := s.NewChatSession(context.Background(), a.ID)
		if err != nil || code != 200 {
			t.Fatalf("new session: %d %s %v", code, body, err)
		}
		marker := s.ChatSessionStartedAt(a.ID)
		if marker.Before(before) {
			t.Errorf("marker %v before the press %v", marker, before)
		}
		if !jsonEqual(t, body, `{"workspace_id":"`+a.ID+`","chat_session_started_at":"`+marker.Format(time.RFC3339Nano)+`"}`) {
			t.Errorf("answer %s", body)
		}
		e := st.event(t)
		if e.Type != "SESSION_RESET" || e.Data["workspace_id"] != a.ID || e.Data["chat_session_started_at"] != marker.Format(time.RFC3339Nano) || e.Data["prev_marker_set"] != prev {
			t.Errorf("press %d: event %+v", i, e)
		}
		before = marker
	}
	if rows := s.Rows(a.ID); len(rows) != 1 {
		t.Errorf("%d rows after the reset, want the 1 kept", len(rows))
	}
	if r := call(t, s, "GET", "/workspaces/"+a.ID, nil, ""); strings.Contains(string(r.body), "chat_session") {
		t.Errorf("GET /workspaces/:id carries the marker: %s", r.body)
	}
	expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/chat-session/new", nil, ""), 401, `{"error":"missing workspace auth token"}`)
	old := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	c := old.CreateWorkspace("ext-C")
	expect(t, call(t, old, "POST", "/workspaces/"+c.ID+"/chat-session/new", bearerH(c.Token), ""), 404, "")
}

// The heartbeat's is_busy overrides active_tasks > 0 (registry.go:1411-1440)
// and every answer carries generation (1677); 2026-05 has neither.
func TestHeartbeatBusyAndGeneration(t *testing.T) {
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_08, moleculetest.Gen2026_05} {
		s := newServer(t, moleculetest.WithGeneration(gen))
		a := s.CreateWorkspace("ext-A")
		registerPoll(t, s, a)
		newest := gen >= moleculetest.Gen2026_08
		for _, tc := range []struct {
			body string
			busy bool
		}{
			{`"active_tasks":2,"current_task":"answering a canvas message"`, newest},
			{`"active_tasks":0,"current_task":""`, false},
			{`"active_tasks":0,"is_busy":true,"current_task":""`, newest},
		} {
			r := call(t, s, "POST", "/registry/heartbeat", bearerH(a.Token), `{"workspace_id":"`+a.ID+`",`+tc.body+`}`)
			if r.status != 200 {
				t.Fatalf("heartbeat %d %s", r.status, r.body)
			}
			if _, has := r.json(t)["generation"]; has != newest {
				t.Errorf("gen %d: generation in %s: %v", gen, r.body, has)
			}
			if st := s.Status(a.ID); st.Busy != tc.busy || !strings.Contains(tc.body, `"current_task":"`+st.CurrentTask+`"`) {
				t.Errorf("gen %d: %s: status %+v", gen, tc.body, st)
			}
		}
	}
}
