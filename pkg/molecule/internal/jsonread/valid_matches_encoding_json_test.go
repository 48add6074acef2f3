package jsonread_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/internal/jsonread"
)

// validSeeds are inputs at the edges of the grammar: each one is valid or
// invalid for one reason.
var validSeeds = []string{
	``, ` `, `[]`, `[ ]`, `{}`, `{ }`, `null`, `true`, `false`, `nul`, `truex`, `"a"`, `"a`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e5x`, `-01`, `2.0e+10`,
	`"\u00e9"`, `"\u00g9"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`, "\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"",
	`[1,]`, `[,1]`, `[1 2]`, `{"a":1,}`, `{"a" 1}`, `{"a":}`, `{1:2}`, `{"a":1}}`, `[1]]`,
	` [ {"id":"a","n":[1,{"x":null}]} , "s" , 2 ] `, "[\t\r\n1\n]", `[1] x`, `"\u12"`,
	`[{"id":"a","id":"b"}]`, `[{"\u0069d":"a"}]`, `{"a":[{"b":{"c":[]}}]}`,
}

// FuzzValidMatchesEncodingJSON pins Valid and SplitArray to json.Valid:
// the same answer on every input, and SplitArray's pieces are the
// elements and members encoding/json finds.
func FuzzValidMatchesEncodingJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := json.Valid(data)
		if got := jsonread.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
		checkSplitArray(t, data, want)
	})
}

func checkSplitArray(t *testing.T, data []byte, valid bool) {
	t.Helper()
	var elems [][]byte
	var members [][2][]byte
	memberCounts := []int{}
	n := 0
	ok := jsonread.SplitArray(data, func(elem []byte) bool {
		elems = append(elems, elem)
		memberCounts = append(memberCounts, n)
		n = 0
		return true
	}, func(key, val []byte) {
		members = append(members, [2][]byte{key, val})
		n++
	})
	isArray := bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("["))
	if ok != (valid && isArray) {
		t.Fatalf("SplitArray(%q) = %v; json.Valid %v, a list %v", data, ok, valid, isArray)
	}
	if !ok {
		return
	}
	var want []json.RawMessage
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("json.Unmarshal(%q): %v", data, err)
	}
	if len(elems) != len(want) {
		t.Fatalf("SplitArray(%q): %d elements, json.Unmarshal %d", data, len(elems), len(want))
	}
	for i, e := range elems {
		if !bytes.Equal(e, want[i]) {
			t.Fatalf("SplitArray(%q) element %d = %q, json.Unmarshal %q", data, i, e, want[i])
		}
		mine := members[:memberCounts[i]]
		members = members[memberCounts[i]:]
		checkMembers(t, e, mine)
	}
}

// checkMembers compares the members handed out for elem with what
// json.Unmarshal reads: the last value of each key, by its decoded name.
func checkMembers(t *testing.T, elem []byte, got [][2][]byte) {
	t.Helper()
	if elem[0] != '{' {
		if len(got) != 0 {
			t.Fatalf("members of non-object %q: %q", elem, got)
		}
		return
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(elem, &want); err != nil {
		t.Fatalf("json.Unmarshal(%q): %v", elem, err)
	}
	last := map[string][]byte{}
	for _, m := range got {
		var key string
		if err := json.Unmarshal([]byte(`"`+string(m[0])+`"`), &key); err != nil {
			t.Fatalf("member key %q of %q: %v", m[0], elem, err)
		}
		last[key] = m[1]
	}
	if len(last) != len(want) {
		t.Fatalf("members of %q: %d keys, json.Unmarshal %d", elem, len(last), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(last[k], v) {
			t.Fatalf("member %q of %q = %q, json.Unmarshal %q", k, elem, last[k], v)
		}
	}
}

// TestValidNestingLimitMatchesEncodingJSON: json.Valid accepts 10,000
// levels of nesting and refuses 10,001; so does Valid.
func TestValidNestingLimitMatchesEncodingJSON(t *testing.T) {
	for _, depth := range []int{9999, 10000, 10001} {
		for _, open := range []string{"[", `{"a":`} {
			close := map[string]string{"[": "]", `{"a":`: "}"}[open]
			data := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth))
			if got, want := jsonread.Valid(data), json.Valid(data); got != want {
				t.Errorf("depth %d of %s: Valid = %v, json.Valid %v", depth, open, got, want)
			}
			if depth == 10001 && jsonread.Valid(data) {
				t.Errorf("depth %d of %s: accepted", depth, open)
			}
		}
	}
}

// TestSplitArrayStopsWhenElemSaysSo: elem returning false ends the scan
// with false, as Array's fn does.
func TestSplitArrayStopsWhenElemSaysSo(t *testing.T) {
	seen := 0
	ok := jsonread.SplitArray([]byte(`[1,2,3]`), func([]byte) bool { seen++; return seen < 2 }, nil)
	if ok || seen != 2 {
		t.Fatalf("SplitArray = %v after %d elements, want false after 2", ok, seen)
	}
}
