// The cursor record's JSON encoding.

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
	o := jsonappend.Begin(b)
	o.String("cursor", v.Cursor)
	if !v.CreatedAt.IsZero() {
		o.Time("created_at", v.CreatedAt)
	}
	if v.Seq != 0 {
		o.Int("seq", v.Seq)
	}
	o.Time("updated_at", v.UpdatedAt)
	if v.Generation != "" {
		o.String("generation", v.Generation)
	}
	if !v.Floor.IsZero() {
		o.Time("floor", v.Floor)
	}
	if v.FloorID != "" {
		o.String("floor_id", v.FloorID)
	}
	if len(v.Recent) > 0 {
		o.Key("recent")
		o.Value(func(b []byte) ([]byte, bool) { return appendRecent(b, v.Recent) })
	}
	return o.End()
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
