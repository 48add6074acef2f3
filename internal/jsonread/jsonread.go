// Package jsonread reads objects of the shape json.Marshal writes, without
// reflection, for hand decoders of the envelopes read once per message
// (the counterpart of internal/jsonappend), and validates and splits the
// activity pages a poller reads (valid.go). Everything here reports false
// when the input needs what it does not do (a key it does not know, a key
// that repeats or holds an escape, a null, a value of another kind); the
// caller then decodes the whole input with json.Unmarshal, so the result
// is always json.Unmarshal's: the hand path only decides faster where it
// is sure.
package jsonread

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Object checks that data is valid JSON holding one object and calls fn
// with each member's key (its bytes, without quotes) and raw value, in
// order; both share data's memory. It reports false when data is not a
// valid object, a key holds an escape or a byte outside ASCII
// (json.Unmarshal matches such keys by their decoded form), or fn returns
// false.
func Object(data []byte, fn func(key, val []byte) bool) bool {
	i := SkipSpace(data, 0)
	return i < len(data) && data[i] == '{' && Valid(data) && members(data, i+1, fn)
}

// ElementObject is Object for an element Array handed out, which is
// valid JSON already: it is not scanned again.
func ElementObject(elem []byte, fn func(key, val []byte) bool) bool {
	return len(elem) > 0 && elem[0] == '{' && members(elem, 1, fn)
}

// Array checks that data is valid JSON holding one list and calls fn
// with each element's bytes, in order (as json.Unmarshal fills a
// []json.RawMessage, sharing data's memory). It reports false when data
// is not a valid list or fn returns false.
func Array(data []byte, fn func(elem []byte) bool) bool {
	return SplitArray(data, fn, nil)
}

// members walks the members of the valid object whose '{' is before i.
func members(data []byte, i int, fn func(key, val []byte) bool) bool {
	for {
		i = SkipSpace(data, i)
		if data[i] == '}' {
			return true
		}
		if data[i] == ',' {
			i = SkipSpace(data, i+1)
		}
		end := SkipString(data, i)
		key := data[i+1 : end-1]
		if !PlainASCII(key) {
			return false
		}
		i = SkipSpace(data, SkipSpace(data, end)+1) // past ':'
		vend := SkipValue(data, i)
		if !fn(key, data[i:vend]) {
			return false
		}
		i = vend
	}
}

// Seen records the fields an object set, so that a repeated key (which
// json.Unmarshal resolves field by field, merging a repeated list's
// elements) is declined. Up to 64 fields.
type Seen uint64

// First marks field f as set and reports whether it was not yet.
func (s *Seen) First(f int) bool {
	bit := Seen(1) << f
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}

// String decodes a string literal as json.Unmarshal does: unescaped valid
// UTF-8 is taken as it is; anything else through json.Unmarshal of the
// literal alone.
func String(val []byte, into *string) bool {
	if len(val) < 2 || val[0] != '"' {
		return false
	}
	inner := val[1 : len(val)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		*into = string(inner)
		return true
	}
	return json.Unmarshal(val, into) == nil
}

// Int decodes an integer literal into an int, as json.Unmarshal does
// (false for a fraction, an exponent or a value out of range).
func Int(val []byte, into *int) bool {
	n, err := strconv.ParseInt(string(val), 10, 64)
	if err != nil {
		return false
	}
	*into = int(n)
	return true
}

// Bool decodes true or false.
func Bool(val []byte, into *bool) bool {
	switch string(val) {
	case "true":
		*into = true
	case "false":
		*into = false
	default:
		return false
	}
	return true
}

// Time decodes a string literal with time.Time.UnmarshalJSON, which is
// what json.Unmarshal calls.
func Time(val []byte, into *time.Time) bool {
	return len(val) > 0 && val[0] == '"' && into.UnmarshalJSON(val) == nil
}

// Raw copies a value that is not null, as json.Unmarshal fills a
// json.RawMessage.
func Raw(val []byte, into *json.RawMessage) bool {
	if string(val) == "null" {
		return false
	}
	*into = append(json.RawMessage(nil), val...)
	return true
}

// Value decodes val into v with json.Unmarshal, for fields of a kind the
// functions above do not read (lists of structs); null is declined.
func Value(val []byte, v any) bool {
	return string(val) != "null" && json.Unmarshal(val, v) == nil
}

// PlainASCII: no escape and no byte outside ASCII.
func PlainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the string literal starting at i.
func SkipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// SkipValue returns the index after the value starting at i (data is
// valid JSON; i at or past its end returns i).
func SkipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return SkipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				i = SkipString(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(data)
	default: // number, true, false, null
		for i < len(data) && !endsLiteral(data[i]) {
			i++
		}
		return i
	}
}

func endsLiteral(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}
