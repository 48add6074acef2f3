package moleculetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// appendString appends v as a JSON string with encoding/json's escaping
// (HTML characters, U+2028/U+2029 escaped; invalid UTF-8 becomes U+FFFD),
// which is what the platform's Go encoder sends.
func appendString(b []byte, v string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, v[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, v[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, v[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, v[start:]...)
	return append(b, '"')
}

// keyOrder orders object keys when re-encoding.
type keyOrder int

const (
	// orderJSONB is PostgreSQL jsonb's: shorter keys first, then bytewise.
	// Rows on the NEW platform come back in this order (docs/protocol.md §4;
	// the keys come reordered).
	orderJSONB keyOrder = iota
	// orderSorted is encoding/json's map order (bytewise), used for the
	// body forwarded to a push agent ("re-serialised with keys sorted").
	orderSorted
)

func (o keyOrder) sort(keys []string) {
	if o == orderSorted {
		sort.Strings(keys)
		return
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
}

// appendJSON encodes a value decoded with UseNumber.
func appendJSON(b []byte, v any, o keyOrder) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case json.Number:
		return append(b, x...)
	case string:
		return appendString(b, x)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e, o)
		}
		return append(b, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		o.sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendJSON(b, x[k], o)
		}
		return append(b, '}')
	default:
		enc, _ := json.Marshal(x)
		return append(b, enc...)
	}
}

var errNotObject = errors.New("not a JSON object")

// decodeObject decodes a JSON object with UseNumber; anything else (an
// array, a scalar, trailing data) is an error.
func decodeObject(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errNotObject
	}
	return m, nil
}

// decodeAny decodes any JSON value with UseNumber.
func decodeAny(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return v, nil
}

// normalizeA2A is the platform's normalizeA2APayload: a body without
// jsonrpc is rewrapped as {"jsonrpc","id","method","params"} (every other
// top-level key dropped), and a missing params.message.messageId is
// generated. It returns the normalised body and its method ("" when the
// method is not a string).
func normalizeA2A(m map[string]any) (map[string]any, string) {
	if _, ok := m["jsonrpc"]; !ok {
		m = map[string]any{
			"jsonrpc": "2.0",
			"id":      newUUID(),
			"method":  m["method"],
			"params":  m["params"],
		}
	}
	if p, ok := m["params"].(map[string]any); ok {
		if msg, ok := p["message"].(map[string]any); ok {
			if id, ok := msg["messageId"].(string); !ok || id == "" {
				msg["messageId"] = newUUID()
			}
		}
	}
	method, _ := m["method"].(string)
	return m, method
}

// messageID returns params.message.messageId.
func messageID(m map[string]any) string {
	if p, ok := m["params"].(map[string]any); ok {
		if msg, ok := p["message"].(map[string]any); ok {
			id, _ := msg["messageId"].(string)
			return id
		}
	}
	return ""
}
