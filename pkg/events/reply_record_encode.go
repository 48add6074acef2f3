package events

import (
	"encoding/json"
	"strconv"
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
	ok, all := true, true
	b = append(b, `{"state":`...)
	b, ok = jsonappend.String(b, r.State)
	all = all && ok
	b = append(b, `,"route":`...)
	b, ok = jsonappend.String(b, r.Route)
	all = all && ok
	b = append(b, `,"posting_at":`...)
	b, ok = jsonappend.Time(b, r.PostingAt)
	all = all && ok
	for _, t := range [...]struct {
		key string
		at  time.Time
	}{{`,"deadline":`, r.Deadline}, {`,"answered_at":`, r.AnsweredAt}, {`,"sent_at":`, r.SentAt}} {
		if !t.at.IsZero() { // omitzero
			b, ok = jsonappend.Time(append(b, t.key...), t.at)
			all = all && ok
		}
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	if r.Reconciled {
		b = append(b, `,"reconciled":true`...)
	}
	return append(b, '}'), all
}
