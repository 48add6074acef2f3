package molecule

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// splitCases are valid JSON objects the splitter must read exactly as
// encoding/json does: the row fixtures plus the awkward cases.
func splitCases(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "rows", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	var cases [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, b)
	}
	for _, s := range []string{
		`{}`, ` { } `, `{"a":[]}`, `{"a":{}}`, `{"a" : 1 , "b":[ 1 , {"c" : "d"} ] }`,
		`{"id":"x","id":"y"}`,                       // the last duplicate wins
		`{"ID":"x","id":"y","Id":"z"}`,              // exact key match
		`{"k\"ey":"v\\\"al","k\u00e9y":"\u00e9\n"}`, // escapes in keys and values
		"{\"caf\xc3\xa9\":\"\xff\xfe\",\"\xff\":1}", // UTF-8 and invalid UTF-8
		`{"a":"}","b":"]","c":"{[","d":"\\"}`,       // brackets inside strings
		`{"n":-1.5e+10,"t":true,"f":false,"z":null,"s":""}`,
		"{\n\t\"a\"\r\n:\n[\n{\"b\":\"c\"}\n,\n2\n]\n}",
		`{"deep":{"a":{"b":{"c":[[[{"d":"e"}]]]}}}}`,
	} {
		cases = append(cases, []byte(s))
	}
	return cases
}

func TestSplitMatchesEncodingJSON(t *testing.T) {
	for _, c := range splitCases(t) {
		if !json.Valid(c) {
			t.Fatalf("case is not valid JSON: %s", c)
		}
		compareValue(t, c)
	}
}

// compareValue checks the splitter against encoding/json for v and,
// recursively, for everything inside it.
func compareValue(t *testing.T, v json.RawMessage) {
	t.Helper()
	switch jsonKind(v) {
	case '{':
		var want map[string]json.RawMessage
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatal(err)
		}
		obj := splitObject(v)
		keys := map[string]bool{}
		for _, m := range obj {
			keys[unquote(m.key)] = true
		}
		if len(keys) != len(want) {
			t.Fatalf("%s: split into %d distinct keys, encoding/json %d", v, len(keys), len(want))
		}
		for k, w := range want {
			g, ok := obj.get(k)
			if !ok || !bytes.Equal(g, w) {
				t.Fatalf("%s: member %q: split %q, encoding/json %q", v, k, g, w)
			}
			compareValue(t, g)
		}
	case '[':
		var want []json.RawMessage
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatal(err)
		}
		got := splitArray(v)
		if len(got) != len(want) {
			t.Fatalf("%s: split into %d elements, encoding/json %d", v, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: element %d: split %q, encoding/json %q", v, i, got[i], want[i])
			}
			compareValue(t, got[i])
		}
	case '"':
		var want string
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatal(err)
		}
		if got := unquote(v); got != want {
			t.Fatalf("string %s: unquote %q, encoding/json %q", v, got, want)
		}
	}
}

// TestActivityRowParseMatchesParseRow: the row split once by Activity
// parses to the same message (or the same error) as ParseRow.
func TestActivityRowParseMatchesParseRow(t *testing.T) {
	cases := splitCases(t)
	cases = append(cases, []byte(`"not an object"`), []byte(`{"id":5}`), []byte(`{"id":"x","created_at":"yesterday"}`))
	for _, c := range cases {
		c = bytes.TrimSpace(c) // as the page's rows are
		want, wantErr := ParseRow(c, "ws-self")
		got, gotErr := pageRow(t, c).Parse("ws-self")
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%s: Parse error %v, ParseRow error %v", c, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Parse\n%+v\nParseRow\n%+v", c, got, want)
		}
	}
}

// FuzzSplitMatchesEncodingJSON: for any valid JSON object or array, the
// splitter agrees with encoding/json.
func FuzzSplitMatchesEncodingJSON(f *testing.F) {
	for _, c := range splitCases(f) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if k := jsonKind(b); (k != '{' && k != '[') || !json.Valid(b) {
			return
		}
		compareValue(t, b)
	})
}
