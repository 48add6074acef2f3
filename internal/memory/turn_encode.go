package memory

import (
	"encoding/json"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// encodeTurns is json.Marshal(turns), the body of a stored message,
// written by hand (one per recorded reply; encoding/json's reflection and
// time.Time.MarshalJSON were most of Record's allocations). A turn holding
// what appendTurn does not write (a time json.Marshal refuses) makes the
// whole list json.Marshal's, error included (TestTurnEncoderMatchesJSON,
// FuzzTurnEncoderMatchesJSON).
func encodeTurns(turns []handler.Turn) ([]byte, error) {
	if turns == nil {
		return []byte("null"), nil
	}
	size := 2
	for i := range turns {
		size += turnSizeHint(&turns[i])
	}
	b := append(make([]byte, 0, size), '[')
	for i := range turns {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendTurn(b, &turns[i]); !ok {
			return json.Marshal(turns)
		}
	}
	return append(b, ']'), nil
}

// turnSizeHint is about the length of t's JSON: its strings plus the keys,
// the time and a few escapes.
func turnSizeHint(t *handler.Turn) int {
	n := 96 + len(t.Role) + len(t.Text) + len(t.ActivityID)
	for _, a := range t.Attachments {
		n += 48 + len(a.URI) + len(a.Name) + len(a.MimeType)
	}
	return n
}

// appendTurn appends t as json.Marshal writes a handler.Turn, or reports
// false.
func appendTurn(b []byte, t *handler.Turn) ([]byte, bool) {
	o := jsonappend.Begin(b)
	o.Text("role", t.Role)
	o.Text("text", t.Text)
	if len(t.Attachments) > 0 { // omitempty
		o.Key("attachments")
		o.Value(func(b []byte) ([]byte, bool) { return events.AppendAttachments(b, t.Attachments), true })
	}
	if t.ActivityID != "" { // omitempty
		o.Text("activity_id", t.ActivityID)
	}
	if !t.At.IsZero() { // omitzero
		o.Time("at", t.At)
	}
	return o.End()
}
