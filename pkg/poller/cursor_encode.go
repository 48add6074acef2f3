package poller

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// marshal encodes v as json.Marshal does, without reflection. The recent
// set holds up to maxRecent ids and the cursor is saved after every page:
// json.Marshal's map encoder allocated twice per id (reflect copies of key
// and value), about fifteen allocations per relayed message. A string
// that needs escaping, or a time json.Marshal refuses, goes through
// json.Marshal.
func (v *cursorValue) marshal() ([]byte, error) {
	if b, ok := v.appendJSON(make([]byte, 0, 160+len(v.Recent)*64)); ok {
		return b, nil
	}
	return json.Marshal(v)
}

func (v *cursorValue) appendJSON(b []byte) ([]byte, bool) {
	ok, all := true, true
	b = append(b, `{"cursor":`...)
	b, ok = jsonappend.String(b, v.Cursor)
	all = all && ok
	if !v.CreatedAt.IsZero() {
		b = append(b, `,"created_at":`...)
		b, ok = jsonappend.Time(b, v.CreatedAt)
		all = all && ok
	}
	b = append(b, `,"updated_at":`...)
	b, ok = jsonappend.Time(b, v.UpdatedAt)
	all = all && ok
	if v.Generation != "" {
		b = append(b, `,"generation":`...)
		b, ok = jsonappend.String(b, v.Generation)
		all = all && ok
	}
	if !v.Floor.IsZero() {
		b = append(b, `,"floor":`...)
		b, ok = jsonappend.Time(b, v.Floor)
		all = all && ok
	}
	if v.FloorID != "" {
		b = append(b, `,"floor_id":`...)
		b, ok = jsonappend.String(b, v.FloorID)
		all = all && ok
	}
	if len(v.Recent) > 0 {
		b, ok = appendRecent(append(b, `,"recent":`...), v.Recent)
		all = all && ok
	}
	return append(b, '}'), all
}

// appendRecent writes the recent set as json.Marshal writes a map: keys
// sorted.
func appendRecent(b []byte, recent map[string]int64) ([]byte, bool) {
	ids := slices.AppendSeq(make([]string, 0, len(recent)), maps.Keys(recent))
	slices.Sort(ids)
	b = append(b, '{')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = jsonappend.String(b, id); !ok {
			return b, false
		}
		b = append(b, ':')
		b = strconv.AppendInt(b, recent[id], 10)
	}
	return append(b, '}'), true
}
