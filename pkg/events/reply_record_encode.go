package events

import (
	"encoding/json"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// Marshal encodes r as json.Marshal does, without reflection: the replier
// writes a record twice per reply (posting, then sent), and json.Marshal
// allocated for every time in it (time.Time.MarshalJSON). A string that
// needs escaping, or a time json.Marshal refuses, goes through
// json.Marshal.
func (r ReplyRecord) Marshal() ([]byte, error) {
	if b, ok := r.appendJSON(make([]byte, 0, 192)); ok {
		return b, nil
	}
	return json.Marshal(r)
}

func (r *ReplyRecord) appendJSON(b []byte) ([]byte, bool) {
	o := jsonappend.Begin(b)
	o.String("state", r.State)
	o.String("route", r.Route)
	o.Time("posting_at", r.PostingAt)
	for _, t := range [...]struct {
		key string
		at  time.Time
	}{{"deadline", r.Deadline}, {"answered_at", r.AnsweredAt}, {"sent_at", r.SentAt}} {
		if !t.at.IsZero() { // omitzero
			o.Time(t.key, t.at)
		}
	}
	o.Int("attempts", int64(r.Attempts))
	if r.Reconciled {
		o.Bool("reconciled", true)
	}
	return o.End()
}
