package jsonappend_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// FuzzStringLikeJSON: a string String writes is written as json.Marshal
// writes it; one it refuses is left to json.Marshal by the caller.
func FuzzStringLikeJSON(f *testing.F) {
	for _, s := range []string{"", "act-1", "say \"hi\"", "<b>", "é", "\u2028", "\x7f", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := jsonappend.String([]byte("x"), s)
		want, _ := json.Marshal(s)
		if ok && string(got) != "x"+string(want) {
			t.Errorf("String(%q) = %s, json.Marshal = %s", s, got[1:], want)
		}
	})
}

// FuzzTimeLikeJSON: Time writes what json.Marshal writes, and refuses
// what it refuses.
func FuzzTimeLikeJSON(f *testing.F) {
	f.Add(int64(1795000000), int64(123456789), 0)
	f.Add(int64(-62135596800), int64(0), 3600)
	f.Add(int64(253402300799), int64(999999999), -19800)
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", offset%(48*3600)))
		got, ok := jsonappend.Time(nil, tm)
		want, err := json.Marshal(tm)
		if ok && err != nil || ok && string(got) != string(want) {
			t.Errorf("Time(%v) = %s (%v), json.Marshal = %s (%v)", tm, got, ok, want, err)
		}
	})
}
