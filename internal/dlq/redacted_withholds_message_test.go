package dlq_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// entryOf is the Entry List and Get return for the stored dead letter
// in the events fixture file.
func entryOf(t *testing.T, fixture string) dlq.Entry {
	t.Helper()
	raw, err := os.ReadFile("../../pkg/events/testdata/" + fixture)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := events.DecodeDeadLetter(raw)
	if err != nil {
		t.Fatal(err)
	}
	return dlq.Entry{Seq: 7, Subject: events.DLQSubject(dl.Stage, dl.WorkspaceID), DeadLetter: dl, Raw: raw}
}

func printed(t *testing.T, e dlq.Entry) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A dead letter's envelope is a user's message: Redacted keeps where it
// came from and why it failed, and withholds what it said, naming what
// it withheld.
func TestRedactedWithholdsTheMessageAndKeepsItsAddress(t *testing.T) {
	t.Parallel()
	e := entryOf(t, "deadletter.json")
	before := printed(t, e)
	r := e.Redacted()
	out := printed(t, r)
	if strings.Contains(out, "Summarise yesterday") || strings.Contains(out, `"raw":`) {
		t.Fatalf("the message is printed: %s", out)
	}
	for _, kept := range []string{e.DeadLetter.WorkspaceID, e.DeadLetter.ActivityID, "canvas_user", "max_deliveries",
		"connection refused", `"created_at"`, `"original_seq":4182`} {
		if !strings.Contains(out, kept) {
			t.Errorf("%s is missing from %s", kept, out)
		}
	}
	if want := []string{"raw", "envelope.text"}; !slices.Equal(r.Withheld, want) {
		t.Errorf("Withheld = %v, want %v", r.Withheld, want)
	}
	if printed(t, e) != before {
		t.Error("Redacted changed the entry it was called on")
	}
}

// An envelope that is not a JSON object (a malformed one, kept as a JSON
// string of its bytes) is withheld whole; so is an undecodable dead
// letter's raw body.
func TestRedactedWithholdsUnreadableEnvelopesWhole(t *testing.T) {
	t.Parallel()
	r := entryOf(t, "deadletter_malformed.json").Redacted()
	if out := printed(t, r); strings.Contains(out, "eyJ2IjoxLCJ3b3Jrc3BhY2VfaWQi") || !slices.Equal(r.Withheld, []string{"raw", "envelope"}) {
		t.Errorf("malformed envelope: withheld %v, printed %s", r.Withheld, out)
	}
	undecodable := dlq.Entry{Seq: 8, DecodeError: "events: decode envelope: unexpected EOF", Raw: []byte(`{"text":"secret plans`)}
	if r := undecodable.Redacted(); r.Raw != nil || !slices.Equal(r.Withheld, []string{"raw"}) || r.DecodeError == "" {
		t.Errorf("undecodable: %+v", r)
	}
}

// Only the keys known to be metadata are kept: attachments, the activity
// row, the answered turn and any key this version does not know are
// withheld.
func TestRedactedKeepsOnlyKnownMetadataKeys(t *testing.T) {
	t.Parallel()
	env := `{"v":1,"workspace_id":"` + wsA + `","activity_id":"a1","source":"canvas_user","text":"t",
		"attachments":[{"uri":"https://files.example/signed?sig=1","name":"plan.pdf"}],
		"raw":{"request_body":{"x":1}},"inbound_text":"q","inbound_attachments":[],"future_body":"f","summary":"s"}`
	e := dlq.Entry{Seq: 9, DeadLetter: &events.DeadLetter{Stage: events.StageReplier, WorkspaceID: wsA, Envelope: json.RawMessage(env)}}
	r := e.Redacted()
	want := []string{"envelope.attachments", "envelope.future_body", "envelope.inbound_attachments", "envelope.inbound_text",
		"envelope.raw", "envelope.summary", "envelope.text"}
	if !slices.Equal(r.Withheld, want) {
		t.Errorf("Withheld = %v, want %v", r.Withheld, want)
	}
	var kept map[string]any
	if err := json.Unmarshal(r.DeadLetter.Envelope, &kept); err != nil || len(kept) != 4 || kept["activity_id"] != "a1" {
		t.Errorf("kept envelope %s (%v)", r.DeadLetter.Envelope, err)
	}
}
