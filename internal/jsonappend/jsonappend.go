// Package jsonappend appends the JSON encoding/json.Marshal writes for a
// few plain values, without reflection, for hand encoders of records
// written once per message. A function that reports false met a value it
// does not write (String a string that needs escaping, Time a time
// json.Marshal refuses); the caller then encodes the whole record with
// json.Marshal, so the bytes are always json.Marshal's. Its one user
// left is the poller's cursor record (internal/poller/cursor_encode.go).
package jsonappend

import (
	"strconv"
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

// Object writes one JSON object field by field, as json.Marshal writes a
// struct: fields in the order written, keys as given (plain names that
// need no escaping). End reports false when a value needed what this
// package does not do; the caller then uses json.Marshal.
type Object struct {
	b      []byte
	ok     bool
	fields int
}

// Begin starts an object at the end of b.
func Begin(b []byte) Object { return Object{b: append(b, '{'), ok: true} }

// Key writes the next field's key; its value is then appended with Value.
func (o *Object) Key(key string) {
	if o.fields > 0 {
		o.b = append(o.b, ',')
	}
	o.fields++
	o.b = append(o.b, '"')
	o.b = append(o.b, key...)
	o.b = append(o.b, '"', ':')
}

// Value appends a field's value with f (String, Time or the caller's own).
func (o *Object) Value(f func([]byte) ([]byte, bool)) {
	var ok bool
	o.b, ok = f(o.b)
	o.ok = o.ok && ok
}

// String writes a string field.
func (o *Object) String(key, s string) {
	o.Key(key)
	var ok bool
	o.b, ok = String(o.b, s)
	o.ok = o.ok && ok
}

// Time writes a time field.
func (o *Object) Time(key string, t time.Time) {
	o.Key(key)
	var ok bool
	o.b, ok = Time(o.b, t)
	o.ok = o.ok && ok
}

// Int writes an integer field.
func (o *Object) Int(key string, n int64) {
	o.Key(key)
	o.b = strconv.AppendInt(o.b, n, 10)
}

// End closes the object and returns it, and whether every value could be
// written here.
func (o *Object) End() ([]byte, bool) { return append(o.b, '}'), o.ok }
