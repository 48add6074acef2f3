package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ReplyRecord.Marshal writes the bytes json.Marshal writes, including for
// the records it hands to json.Marshal (escapes, refused times).
func TestReplyRecordEncodesLikeJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 11, 30, 0, 123456789, time.UTC)
	for _, rec := range []events.ReplyRecord{
		{},
		{State: events.StatePosting, Route: events.RouteNotify, PostingAt: at, Deadline: at.Add(30 * time.Second), Attempts: 1},
		{State: events.StateSent, Route: events.RouteA2A, PostingAt: at, Deadline: at.Add(time.Minute), SentAt: at.Add(time.Second), Attempts: 2},
		{State: events.StatePosting, Route: events.RouteNotify, PostingAt: at, AnsweredAt: at.Add(time.Second), Attempts: -3, Reconciled: true},
		{State: events.StateSent, Route: events.RouteNotify, PostingAt: at.In(time.FixedZone("x", 5*3600+1800)), SentAt: at.Truncate(time.Second)},
		{State: `odd "state"`, Route: "<a2a>", PostingAt: at},
		{State: events.StateSent, Route: events.RouteNotify, PostingAt: at, SentAt: at.AddDate(9000, 0, 0)},
	} {
		got, gerr := rec.Marshal()
		want, werr := json.Marshal(rec)
		if string(got) != string(want) || (gerr == nil) != (werr == nil) {
			t.Errorf("Marshal = %s, %v\njson.Marshal = %s, %v", got, gerr, want, werr)
		}
	}
}

func BenchmarkReplyRecordMarshal(b *testing.B) {
	at := time.Now().UTC()
	rec := events.ReplyRecord{State: events.StateSent, Route: events.RouteNotify, PostingAt: at, Deadline: at.Add(30 * time.Second), SentAt: at, Attempts: 1}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(rec)
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = rec.Marshal()
		}
	})
}
