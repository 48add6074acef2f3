package events_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func TestConversationOfNamesEachConversationAsAKeyToken(t *testing.T) {
	const peer = "e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b"
	token := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	for _, tc := range []struct {
		name string
		in   events.Inbound
		want string // "" when only the shape is checked
	}{
		{"canvas user", events.Inbound{Source: events.SourceCanvasUser}, "canvas"},
		{"cron posts in the canvas chat", events.Inbound{Source: events.SourceCanvasUser, Cron: true}, "canvas"},
		{"peer", events.Inbound{Source: events.SourcePeerAgent, SourceWorkspaceID: peer}, "peer-" + peer},
		{"self", events.Inbound{Source: events.SourceSelf, SourceWorkspaceID: "x"}, "self"},
		{"peer context", events.Inbound{Source: events.SourcePeerAgent, SourceWorkspaceID: peer, ContextID: "ctx-1", TaskID: "t"}, "peer-" + peer + "-ctx-ctx-1"},
		{"canvas task without context", events.Inbound{Source: events.SourceCanvasUser, TaskID: "task_7"}, "canvas-task-task_7"},
		{"context with dots and spaces is hashed", events.Inbound{Source: events.SourceCanvasUser, ContextID: "a.b c>*"}, ""},
		{"long context is hashed", events.Inbound{Source: events.SourceCanvasUser, ContextID: strings.Repeat("a", 65)}, ""},
		{"malformed peer id is hashed", events.Inbound{Source: events.SourcePeerAgent, SourceWorkspaceID: "a.b"}, ""},
	} {
		got := events.ConversationOf(&tc.in)
		if tc.want != "" && got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if !token.MatchString(got) || len(got) > 140 {
			t.Errorf("%s: %q is not a short key token", tc.name, got)
		}
	}
	a := events.ConversationOf(&events.Inbound{Source: events.SourceCanvasUser, ContextID: "a.b"})
	b := events.ConversationOf(&events.Inbound{Source: events.SourceCanvasUser, ContextID: "a_b"})
	c := events.ConversationOf(&events.Inbound{Source: events.SourcePeerAgent, SourceWorkspaceID: "p", ContextID: "a.b"})
	if a == b || a == c {
		t.Errorf("distinct contexts share a conversation: %q %q %q", a, b, c)
	}
}
