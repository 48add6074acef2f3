package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A handled record of a reply posted directly carries its posting mark,
// which reads back as the posting record the replier would have created;
// a record without one has no mark fields at all, and a relay that knows
// nothing of the mark (its HandledRecord without the fields) still reads
// the record.
func TestHandledRecordCarriesThePostingMark(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	marked := events.HandledRecord{Outcome: events.OutcomeReplied, Reply: json.RawMessage(`{"v":1}`), Delivery: 1, HandledAt: at,
		DirectPostingAt: at, DirectDeadline: at.Add(30 * time.Second)}
	data, err := marked.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var back events.HandledRecord
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	want := events.ReplyRecord{State: events.StatePosting, Route: events.RouteNotify, PostingAt: at, Deadline: at.Add(30 * time.Second), Attempts: 1}
	if got := back.Mark(); got.IsZero() || got.Record() != want {
		t.Errorf("mark read back %+v → %+v, want %+v", got, got.Record(), want)
	}
	var old struct {
		Outcome   string          `json:"outcome"`
		Reply     json.RawMessage `json:"reply,omitempty"`
		Delivery  uint64          `json:"delivery"`
		HandledAt time.Time       `json:"handled_at"`
	}
	if err := json.Unmarshal(data, &old); err != nil || old.Outcome != events.OutcomeReplied || string(old.Reply) != `{"v":1}` {
		t.Errorf("an older relay reads %+v, %v", old, err)
	}

	plain, err := events.HandledRecord{Outcome: events.OutcomeReplied, Reply: json.RawMessage(`{"v":1}`), Delivery: 1, HandledAt: at}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "direct") {
		t.Errorf("a record without a mark encodes one: %s", plain)
	}
	var unmarked events.HandledRecord
	if err := json.Unmarshal(plain, &unmarked); err != nil || !unmarked.Mark().IsZero() {
		t.Errorf("a record without a mark reads back mark %+v (%v)", unmarked.Mark(), err)
	}
}
