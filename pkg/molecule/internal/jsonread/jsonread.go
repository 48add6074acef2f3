// Package jsonread validates and splits the activity pages a poller
// reads, in one pass and without allocating (valid.go), and reads their
// created_at times (rfc3339.go): with encoding/json the page and its rows
// were 8 % of the relay's CPU per message on the shipped defaults,
// against 0.8 % with this package (BenchmarkActivityPageRead in
// pkg/molecule). It accepts exactly what json.Valid accepts
// (FuzzValidMatchesEncodingJSON) and splits as json.Unmarshal into
// []json.RawMessage and map[string]json.RawMessage does
// (FuzzSplitMatchesEncodingJSON in pkg/molecule). It is pkg/molecule's
// private part: nothing else may import it.
package jsonread

import (
	"unicode/utf8"
)

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
