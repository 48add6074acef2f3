package events_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// HandledRecord.Marshal writes the bytes json.Marshal writes, reply
// embedded as published, for every outcome; an unknown outcome still
// comes out as valid JSON.
func TestHandledRecordEncodesLikeJSON(t *testing.T) {
	reply, err := events.Reply{WorkspaceID: "ws", ActivityID: "a1", Text: "say \"hi\" <b>\u2028", MessageID: "m"}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 25, 11, 30, 0, 123456789, time.UTC)
	for _, rec := range []events.HandledRecord{
		{Outcome: events.OutcomeReplied, Reply: reply, Delivery: 3, HandledAt: at},
		{Outcome: events.OutcomeReplied, Reply: reply, Delivery: 1, HandledAt: at, DirectPostingAt: at, DirectDeadline: at.Add(30 * time.Second)},
		{Outcome: events.OutcomeReplied, Reply: reply, Delivery: 1, HandledAt: at, DirectPostingAt: at, DirectDeadline: at.Add(30 * time.Second),
			ReplyRefused: &events.Refusal{Reason: events.ReasonPermanent, Error: "refused (403 \"no\")", At: at.Add(time.Second)}},
		{Outcome: events.OutcomeNoReply, Delivery: 1, HandledAt: at.Truncate(time.Second)},
		{Outcome: events.OutcomeSuppressed, Delivery: 18446744073709551615, HandledAt: at.In(time.FixedZone("x", 3600))},
		{Outcome: `odd "outcome"`, Delivery: 1, HandledAt: at},
		{},
	} {
		got, err := rec.Marshal()
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", rec, err)
		}
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Marshal = %s\n json.Marshal = %s", got, want)
		}
	}
	// A time json.Marshal refuses (a zone offset of a day or more) is
	// refused too, not written.
	odd := events.HandledRecord{Outcome: events.OutcomeNoReply, HandledAt: at.In(time.FixedZone("odd", 25*3600))}
	if _, err := odd.Marshal(); err == nil {
		t.Errorf("Marshal of a time json.Marshal refuses: no error")
	}
}
