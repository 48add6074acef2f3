package moleculetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strconv"
)

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
		return quoteJSON(b, x)
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
			b = quoteJSON(b, k)
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

// quoteJSON appends s as json.Marshal writes a string.
func quoteJSON(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}
