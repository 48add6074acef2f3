package molecule

import (
	"bytes"
	"encoding/json"
	"math"
	"unicode/utf8"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/internal/jsonread"
)

// Splitting JSON that is already known to be valid.
//
// A feed row used to be decoded level by level with json.Unmarshal into
// map[string]json.RawMessage: every level validated and decoded its bytes
// again, so the text of a message was scanned about ten times per poll
// (docs/performance.md). The page is validated once (page.go); below
// that, these functions only find where values start and end. They give
// the same result as json.Unmarshal into a map[string]json.RawMessage or a
// []json.RawMessage (exact key match, the last duplicate key wins), which
// TestSplitMatchesEncodingJSON checks; they must never see invalid JSON.

// rawObject is a JSON object split into its members, in order, values
// still raw. Keys stay literals: a lookup compares bytes and allocates
// nothing unless the key holds an escape.
type rawObject []member

type member struct {
	key     []byte // the key's string literal, quotes included
	escaped bool   // key holds a backslash or non-ASCII: compare it unquoted
	val     json.RawMessage
}

// get returns the value of key, the last one if the key repeats (as
// json.Unmarshal into a map keeps it).
func (o rawObject) get(key string) (json.RawMessage, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		m := o[i]
		if m.escaped {
			if unquote(m.key) == key {
				return m.val, true
			}
		} else if string(m.key[1:len(m.key)-1]) == key {
			return m.val, true
		}
	}
	return nil, false
}

// splitObject splits a valid JSON object into its members. The values
// share data's memory. It never returns nil.
func splitObject(data []byte) rawObject {
	i := jsonread.SkipSpace(data, 0) + 1 // past '{'
	obj := make(rawObject, 0, 16)
	for {
		i = jsonread.SkipSpace(data, i)
		if i >= len(data) || data[i] == '}' {
			return obj
		}
		if data[i] == ',' {
			i = jsonread.SkipSpace(data, i+1)
		}
		end := jsonread.SkipString(data, i)
		key := data[i:end:end]
		i = jsonread.SkipSpace(data, end) + 1 // past ':'
		i = jsonread.SkipSpace(data, i)
		vend := jsonread.SkipValue(data, i)
		obj = append(obj, member{key: key, escaped: !jsonread.PlainASCII(key), val: json.RawMessage(data[i:vend:vend])})
		i = vend
	}
}

// splitArray splits a valid JSON array into its elements, sharing data's
// memory.
func splitArray(data []byte) []json.RawMessage {
	i := jsonread.SkipSpace(data, 0) + 1 // past '['
	var elems []json.RawMessage
	for {
		i = jsonread.SkipSpace(data, i)
		if i >= len(data) || data[i] == ']' {
			if elems == nil {
				elems = []json.RawMessage{} // "[]" is present, not null
			}
			return elems
		}
		if data[i] == ',' {
			i = jsonread.SkipSpace(data, i+1)
		}
		end := jsonread.SkipValue(data, i)
		elems = append(elems, json.RawMessage(data[i:end:end]))
		i = end
	}
}

// unquote decodes a valid JSON string literal. Escapes and non-ASCII
// bytes (json.Unmarshal replaces invalid UTF-8) take encoding/json's path.
func unquote(lit []byte) string {
	inner := lit[1 : len(lit)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
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
