package mcpchannel_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// quickly is how soon a tool must say what became of a reply the platform
// refused; before, it waited postWait (15 s) and then said the relay was
// still posting it.
const quickly = 5 * time.Second

// A reply the 2026-08 platform refuses for good — a canvas reply from a
// workspace whose "talk to user" is off (403 talk_to_user_disabled,
// enteros-core aeec8e47 handlers/activity.go:872-877), a peer reply from a
// workspace with can_delegate=false (403 "tool call failed",
// handlers/a2a_proxy.go:789-797) — is reported by reply_to_workspace as an
// error at once, with the cause and what to do, and dead-lettered once.
func TestReplyRefusedForGoodIsAnErrorAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cause string
		peer        bool
		set         func(*moleculetest.Server, string)
	}{
		{"talk to user disabled", "talking to the user is disabled for this workspace", false,
			func(s *moleculetest.Server, id string) { s.SetTalkToUser(id, false) }},
		{"can_delegate false", "may not send A2A messages (can_delegate=false", true,
			func(s *moleculetest.Server, id string) { s.SetCanDelegate(id, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
			r := startRelay(t, w)
			cl := connect(t, r)
			tc.set(w.Plat, w.Agent.ID)
			if tc.peer {
				w.SendPeer(0, "question")
			} else {
				w.SendCanvas("question")
			}
			n := cl.next(20 * time.Second)
			start := time.Now()
			text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "the answer"})
			took := time.Since(start)
			t.Logf("reply_to_workspace answered in %s: %s", took, text)
			if !isErr || !strings.Contains(text, "NOT delivered") || !strings.Contains(text, tc.cause) {
				t.Fatalf("reply: %q (error %v); want an error naming %q", text, isErr, tc.cause)
			}
			if took > quickly {
				t.Errorf("answered after %s, want under %s", took, quickly)
			}
			if dls := w.DeadLetters(); len(dls) != 1 {
				t.Errorf("%d dead letters, want 1", len(dls))
			}
		})
	}
}

// send_message_to_user from a workspace whose "talk to user" is off is an
// error at once too (the same refusal through the reply stream).
func TestSendToUserRefusedForGoodIsAnErrorAtOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := startRelay(t, w)
	cl := connect(t, r)
	w.Plat.SetTalkToUser(w.Agent.ID, false)
	start := time.Now()
	text, isErr := cl.call(mcpchannel.ToolSendToUser, map[string]any{"message": "progress"})
	took := time.Since(start)
	t.Logf("send_message_to_user answered in %s: %s", took, text)
	if !isErr || !strings.Contains(text, "talking to the user is disabled") || took > quickly {
		t.Fatalf("send_message_to_user: %q (error %v) after %s", text, isErr, took)
	}
}

// A reply the platform refuses for now (429 with a long Retry-After) is
// reported as retried, soon, not as sent nor as refused.
func TestReplyRefusedForNowSaysItIsRetried(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := startRelay(t, w)
	cl := connect(t, r)
	w.SendCanvas("question")
	n := cl.next(20 * time.Second)
	w.Plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + w.Agent.ID + "/notify",
		Status: http.StatusTooManyRequests, Body: `{"error":"rate limit exceeded","retry_after":60}`, Header: http.Header{"Retry-After": {"60"}}})
	start := time.Now()
	text, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "the answer"})
	took := time.Since(start)
	t.Logf("reply_to_workspace answered in %s: %s", took, text)
	if isErr || !strings.Contains(text, "retries it") || took > quickly {
		t.Fatalf("reply: %q (error %v) after %s; want \"retries it\" under %s", text, isErr, took, quickly)
	}
	if dls := w.DeadLetters(); len(dls) != 0 {
		t.Errorf("%d dead letters for a refusal for now", len(dls))
	}
}
