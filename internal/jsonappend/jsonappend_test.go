package jsonappend_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

func TestStringLikeJSON(t *testing.T) {
	for _, s := range []string{"", "act-1", "7f3c9a10-0000-4000-8000-000000000001", "a b~", "say \"hi\"", `back\slash`, "<b>", "a&b", "tab\t", "é", "\u2028", "\x7f"} {
		got, ok := jsonappend.String(nil, s)
		want, _ := json.Marshal(s)
		if ok && string(got) != string(want) {
			t.Errorf("String(%q) = %s, json.Marshal = %s", s, got, want)
		}
	}
	for _, s := range []string{"act-1", "7f3c9a10-0000-4000-8000-000000000001", "cron-2026-11-25T11:30:00Z"} {
		if _, ok := jsonappend.String(nil, s); !ok {
			t.Errorf("String(%q) refused a plain id", s)
		}
	}
}

func TestTimeLikeJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 11, 30, 0, 123456789, time.UTC)
	for _, tm := range []time.Time{at, at.Truncate(time.Second), at.Add(100 * time.Millisecond), {}, at.In(time.FixedZone("x", 3600)),
		at.In(time.FixedZone("y", -(5*3600 + 30*60))), at.AddDate(8000, 0, 0), at.In(time.FixedZone("z", 24*3600)), time.Now(), time.Now().UTC()} {
		got, ok := jsonappend.Time(nil, tm)
		want, err := json.Marshal(tm)
		if ok != (err == nil) {
			t.Errorf("Time(%v) ok=%v, json.Marshal error %v", tm, ok, err)
		} else if ok && string(got) != string(want) {
			t.Errorf("Time(%v) = %s, json.Marshal = %s", tm, got, want)
		}
	}
}

// An Object written field by field is what json.Marshal writes for the
// struct with the same fields; a value it cannot write makes End say so.
func TestObjectLikeJSON(t *testing.T) {
	type rec struct {
		Name string    `json:"name"`
		At   time.Time `json:"at"`
		N    int64     `json:"n"`
	}
	at := time.Date(2026, 11, 25, 11, 30, 0, 5, time.UTC)
	v := rec{Name: "act-1", At: at, N: -3}
	o := jsonappend.Begin(nil)
	o.String("name", v.Name)
	o.Time("at", v.At)
	o.Int("n", v.N)
	got, ok := o.End()
	want, _ := json.Marshal(v)
	if !ok || string(got) != string(want) {
		t.Errorf("Object = %s (%v), json.Marshal = %s", got, ok, want)
	}
	o = jsonappend.Begin(nil)
	o.String("name", `needs "escaping"`)
	if _, ok := o.End(); ok {
		t.Error("End = ok for a string that needs escaping")
	}
}
