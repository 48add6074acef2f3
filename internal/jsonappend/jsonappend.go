// Package jsonappend appends the JSON encoding/json.Marshal writes for a
// few plain values, without reflection, for hand encoders of records
// written once per message. A function that reports false met a value it
// does not write (String a string that needs escaping, Time a time
// json.Marshal refuses); the caller then encodes the whole record with
// json.Marshal, so the bytes are always json.Marshal's. Quote escapes
// any string as json.Marshal does; Compact leaves raw JSON that needs
// escaping to it.
package jsonappend

import (
	"bytes"
	"encoding/json"
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

// Quote appends any s as json.Marshal writes a string: quoted, with '"'
// and '\\' escaped, control characters as \b, \f, \n, \r, \t or \u00XX,
// the HTML characters '<', '>' and '&' as \u00XX, U+2028 and U+2029 as
// \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd (encoding/json
// appendString, checked by FuzzQuoteLikeJSON). For free text such as a
// message's; String, which only copies, suits identifiers.
func Quote(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Compact appends raw as json.Marshal writes a json.RawMessage: compacted
// (json.Compact). It reports false when raw is not valid JSON (json.Marshal
// fails) or holds a character json.Marshal would escape in it ('<', '>',
// '&', U+2028, U+2029).
func Compact(b []byte, raw []byte) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true // json.RawMessage's MarshalJSON
	}
	for i, c := range raw {
		if c == '<' || c == '>' || c == '&' ||
			(c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9)) {
			return b, false
		}
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, false
	}
	return buf.Bytes(), true
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

// Text writes a string field of free text (Quote).
func (o *Object) Text(key, s string) {
	o.Key(key)
	o.b = Quote(o.b, s)
}

// Compact writes a field of raw JSON as json.Marshal writes a
// json.RawMessage (Compact).
func (o *Object) Compact(key string, raw []byte) {
	o.Key(key)
	var ok bool
	o.b, ok = Compact(o.b, raw)
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

// Uint writes an unsigned integer field.
func (o *Object) Uint(key string, n uint64) {
	o.Key(key)
	o.b = strconv.AppendUint(o.b, n, 10)
}

// Bool writes a boolean field.
func (o *Object) Bool(key string, v bool) {
	o.Key(key)
	o.b = strconv.AppendBool(o.b, v)
}

// Raw writes a field whose value is already JSON (an encoded object).
func (o *Object) Raw(key string, v []byte) {
	o.Key(key)
	o.b = append(o.b, v...)
}

// End closes the object and returns it, and whether every value could be
// written here.
func (o *Object) End() ([]byte, bool) { return append(o.b, '}'), o.ok }
