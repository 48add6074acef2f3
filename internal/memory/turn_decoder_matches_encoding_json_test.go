package memory

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// decodeRecord reads a stored message's turns through a hand decoder; it
// must give what decoding with encoding/json alone gave (a list of raw
// turns, each decoded on its own, one that does not decode skipped), and
// read what json.Marshal writes without encoding/json.

// recordByEncodingJSON is decodeRecord as it was, with encoding/json only.
func recordByEncodingJSON(data []byte) (record, bool) {
	if isForgetMarker(data) {
		return record{forget: true}, true
	}
	var raws []json.RawMessage
	if json.Unmarshal(data, &raws) != nil {
		return record{}, false
	}
	r := record{turns: make([]handler.Turn, 0, len(raws)), sizes: make([]int, 0, len(raws))}
	for _, raw := range raws {
		var t handler.Turn
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		r.turns = append(r.turns, t)
		r.sizes = append(r.sizes, len(raw))
	}
	return r, true
}

func recordInputs(t testing.TB) [][]byte {
	at := time.Date(2026, 11, 26, 21, 40, 0, 123456789, time.UTC)
	turns := []handler.Turn{
		{Role: "user", Text: "hello \"there\" <b> & é 😀\n", ActivityID: "a1", At: at},
		{Role: "agent", Text: "echo", ActivityID: "a1", At: at.Add(time.Second),
			Attachments: []handler.Attachment{{URI: "u", Name: "n", MimeType: "text/plain", Size: 3}}},
		{Role: "user", Text: "no id, no time"},
	}
	marshalled, err := json.Marshal(turns)
	if err != nil {
		t.Fatal(err)
	}
	in := [][]byte{marshalled, forgetMarker}
	for _, s := range []string{
		`[]`, `null`, `{}`, `[`, `"x"`, ` [ {"role":"user","text":"spaced"} , {"text":"b"} ] `,
		`[{"role":"user","text":"a"},{"role":1},{"text":"c"}]`,
		`[{"Role":"user","text":"case folded"}]`,
		`[{"role":"user","role":"agent"}]`,
		`[{"role":"user","text":null}]`,
		`[{"role":"user","extra":true}]`,
		`[{"role":"user","at":"not a time"}]`,
		`[{"role":"user","attachments":[{"uri":"a"}],"attachments":[{"name":"b"}]}]`,
		`[{"r\u006fle":"user"}]`,
		`[1,"two",null,[3],{"role":"user"}]`,
		`[{"role":"user","text":"a\u00e9\ud83d\ude00\/b"}]`,
		"[{\"role\":\"user\",\"text\":\"bad \xff utf8\"}]",
	} {
		in = append(in, []byte(s))
	}
	return in
}

func checkRecordDecoder(t *testing.T, data []byte) {
	got, gotOK := decodeRecord(data)
	want, wantOK := recordByEncodingJSON(data)
	if gotOK != wantOK || !reflect.DeepEqual(got, want) {
		t.Errorf("record of %q:\nhand %v %+v\njson %v %+v", data, gotOK, got, wantOK, want)
	}
}

func TestTurnDecoderMatchesEncodingJSON(t *testing.T) {
	for _, data := range recordInputs(t) {
		checkRecordDecoder(t, data)
	}
	marshalled := recordInputs(t)[0]
	var n int
	ok := decodeTurnFast([]byte(`{"role":"user","text":"x"}`), &handler.Turn{})
	for _, raw := range splitForTest(t, marshalled) {
		if decodeTurnFast(raw, &handler.Turn{}) {
			n++
		}
	}
	if !ok || n != 3 {
		t.Errorf("the hand decoder read %d of the 3 turns json.Marshal wrote (and a plain one: %v); it must read all", n, ok)
	}
}

func splitForTest(t *testing.T, data []byte) []json.RawMessage {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		t.Fatal(err)
	}
	return raws
}

func FuzzTurnDecoderMatchesEncodingJSON(f *testing.F) {
	for _, data := range recordInputs(f) {
		f.Add(data)
	}
	f.Fuzz(checkRecordDecoder)
}

// BenchmarkDecodeRecord compares decodeRecord with the encoding/json-only
// decoder on a record of two turns as the replier writes it.
func BenchmarkDecodeRecord(b *testing.B) {
	at := time.Date(2026, 11, 26, 21, 40, 0, 123456789, time.UTC)
	data, err := json.Marshal([]handler.Turn{
		{Role: "user", Text: "hello there, message 1234 of the burst", ActivityID: "3f2a9c1e-1111-2222-3333-444455556666", At: at},
		{Role: "agent", Text: "echo: hello there, message 1234 of the burst", ActivityID: "3f2a9c1e-1111-2222-3333-444455556666", At: at},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			recordByEncodingJSON(data)
		}
	})
	b.Run("decodeRecord", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decodeRecord(data)
		}
	})
}
