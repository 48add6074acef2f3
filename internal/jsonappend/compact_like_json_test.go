package jsonappend_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

var compactCases = []string{
	`{"id":"act-1","n":1}`, "{ \"id\" : \"a b\",\n  \"list\": [1, 2.5e3, true, null] }\n", `"str"`, `null`, ` 12 `,
	`{"html":"<b>&</b>"}`, "{\"ls\":\"\u2028\"}", `{"bad":}`, ``, `{"a":1} {"b":2}`, "{\"inv\":\"\xff\"}", `{"esc":"\u003c\n"}`,
}

// Compact writes what json.Marshal writes for a json.RawMessage, and
// declines only raw JSON that is invalid or holds what json.Marshal
// escapes.
func TestCompactLikeJSON(t *testing.T) {
	for _, raw := range compactCases {
		checkCompact(t, []byte(raw))
	}
	checkCompact(t, nil)
}

// FuzzCompactLikeJSON: Compact against json.Marshal for arbitrary bytes.
func FuzzCompactLikeJSON(f *testing.F) {
	for _, raw := range compactCases {
		f.Add([]byte(raw))
	}
	f.Fuzz(checkCompact)
}

func checkCompact(t *testing.T, raw []byte) {
	got, ok := jsonappend.Compact([]byte("prefix"), raw)
	want, err := json.Marshal(json.RawMessage(raw))
	escapes := bytes.ContainsAny(raw, "<>&\u2028\u2029")
	switch {
	case ok && (err != nil || string(got) != "prefix"+string(want)):
		t.Errorf("Compact(%q) = %s, json.Marshal = %s, %v", raw, got[len("prefix"):], want, err)
	case !ok && err == nil && !escapes:
		t.Errorf("Compact(%q) declined what json.Marshal writes as %s", raw, want)
	case !ok && string(got) != "prefix":
		t.Errorf("Compact(%q) declined but appended %q", raw, got[len("prefix"):])
	}
}
