// Package jsonappend appends the JSON encoding/json.Marshal writes for a
// few plain values, without reflection, for hand encoders of records
// written once per message. Each function reports false when its value
// needs what it does not do (escaping, a time json.Marshal refuses); the
// caller then encodes the whole record with json.Marshal, so the bytes
// are always json.Marshal's.
package jsonappend

import (
	"time"
	"unicode/utf8"
)

// String appends s quoted when it needs no escaping in json.Marshal's
// output: printable ASCII without '"', '\\' or the HTML characters it
// escapes ('<', '>', '&').
func String(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// Time appends t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted), for the years it accepts.
func Time(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return b, false // MarshalJSON refuses a zone offset of a day or more
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}
