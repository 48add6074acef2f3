package events_test

import (
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

const ws = "35637291-d55e-4553-896c-13c2e02fe4f7"

func TestSubjectsAndIDs(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{events.InboundSubject(ws), "molecule.inbound." + ws},
		{events.ReplySubject(ws), "molecule.reply." + ws},
		{events.DLQSubject(events.StageDispatcher, ws), "molecule.dlq.dispatcher." + ws},
		{events.DLQSubject(events.StagePoller, ws), "molecule.dlq.poller." + ws},
		{events.InboundMsgID(ws, "act-1"), ws + ":act-1"},
		{events.ReplyMsgID(ws, "act-1"), "reply:" + ws + ":act-1"},
		{events.HandledKey(ws, "9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1b"), ws + ".9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1b"},
		{events.ReplyKey(ws, "act_1=x"), ws + ".act_1=x"},
		// Characters outside the KV key alphabet become '_', so a malformed
		// id cannot produce an invalid key or an extra key token.
		{events.HandledKey("w.s", "a b/c*>é"), "w_s.a_b_c___"},
		{events.ReplyKey("", ""), "."},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	// The reply msg id of an activity differs from its inbound msg id: both
	// streams share nothing, but operators grep for them.
	if events.ReplyMsgID(ws, "a") == events.InboundMsgID(ws, "a") {
		t.Error("reply and inbound msg ids coincide")
	}
}

func TestNamesAreDistinct(t *testing.T) {
	names := []string{
		events.StreamInbound, events.StreamReply, events.StreamDLQ,
		events.BucketCursors, events.BucketPollerStatus, events.BucketHandled, events.BucketReplies, events.BucketMCPLeases, events.BucketPollerGroups, events.BucketHistory, events.BucketAsks,
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] || n == "" || strings.ContainsAny(n, ". *>") {
			t.Errorf("bad or duplicate name %q", n)
		}
		seen[n] = true
	}
	prefixes := []string{events.SubjectInboundPrefix, events.SubjectReplyPrefix, events.SubjectDLQPrefix}
	for i, a := range prefixes {
		for j, b := range prefixes {
			if i != j && strings.HasPrefix(a+".", b+".") {
				t.Errorf("subject prefix %q overlaps %q", a, b)
			}
		}
	}
}

func TestValidateWorkspaceID(t *testing.T) {
	for _, tt := range []struct {
		id string
		ok bool
	}{
		{ws, true},
		{"ws-1", true},
		{"WS_1", true},
		{"tenant:42", true},
		{"", false},
		{"a.b", false},
		{"*", false},
		{"ws>", false},
		{"a b", false},
		{"tab\tbed", false},
		{"line\nbreak", false},
		{"cr\r", false},
	} {
		err := events.ValidateWorkspaceID(tt.id)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateWorkspaceID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
		}
	}
}
