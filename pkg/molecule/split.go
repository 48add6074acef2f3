package molecule

import (
	"bytes"
	"encoding/json"
	"math"
)

// rawObject is a JSON object's members, values still raw, as
// json.Unmarshal into a map leaves them: exact keys, the last of a
// repeated key wins.
type rawObject map[string]json.RawMessage

// get returns the value of key.
func (o rawObject) get(key string) (json.RawMessage, bool) {
	v, ok := o[key]
	return v, ok
}

// splitObject splits a valid JSON object into its members. It never
// returns nil.
func splitObject(data []byte) rawObject {
	o := rawObject{}
	_ = json.Unmarshal(data, (*map[string]json.RawMessage)(&o)) // valid by the caller's contract
	return o
}

// splitArray splits a valid JSON array into its elements.
func splitArray(data []byte) []json.RawMessage {
	elems := []json.RawMessage{} // "[]" is present, not null
	_ = json.Unmarshal(data, &elems)
	return elems
}

// unquote decodes a valid JSON string literal.
func unquote(lit []byte) string {
	var s string
	_ = json.Unmarshal(lit, &s) // valid by the caller's contract
	return s
}

// seqValue reads a row's seq (2026-08 platforms): a positive integer
// literal, or 0 (none) for anything else, absent included.
// It reads the digits itself: a page's rows cost no allocation.
func seqValue(v []byte) int64 {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || len(v) > 1 && v[0] == '0' {
		return 0
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' || n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
