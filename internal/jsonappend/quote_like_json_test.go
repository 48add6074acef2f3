package jsonappend_test

import (
	"encoding/json"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// quoteCases are the escapes of encoding/json's appendString, one each.
var quoteCases = []string{
	"", "hello", "say \"hi\"", `back\slash`, "<b>&amp;</b>", "tab\tnew\nline\rcr", "\b\f", "\x00\x01\x1f", "\x7f",
	"é ünïcödé 日本語 🎉", "line\u2028para\u2029", "bad \xff utf-8 \xc3", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 above U+10FFFF",
}

// Quote writes what json.Marshal writes for any string.
func TestQuoteLikeJSON(t *testing.T) {
	for _, s := range quoteCases {
		checkQuote(t, s)
	}
}

// FuzzQuoteLikeJSON: Quote against json.Marshal for arbitrary strings,
// valid UTF-8 or not.
func FuzzQuoteLikeJSON(f *testing.F) {
	for _, s := range quoteCases {
		f.Add(s)
	}
	f.Fuzz(checkQuote)
}

func checkQuote(t *testing.T, s string) {
	got := jsonappend.Quote([]byte("prefix"), s)
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "prefix"+string(want) {
		t.Errorf("Quote(%q) = %s, json.Marshal = %s", s, got[len("prefix"):], want)
	}
}
