package molecule_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// FuzzParseRow checks ParseRow's contract on arbitrary input: it never
// panics; it returns either a message or an error matching ErrMalformedRow
// (a *RowError), never both or neither; a message has an id, keeps the
// input as Raw, and is classified consistently with its method and
// source. Seeds are the fixtures plus hand-made edge cases.
//
//	go test -run '^$' -fuzz FuzzParseRow -fuzztime 60s ./pkg/molecule
func FuzzParseRow(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "rows", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("fixtures: %v", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, wsA)
	}
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"id":"x"}`,
		`{"id":"x","created_at":"2026-11-21T17:25:36Z"}`,
		`{"id":"x","created_at":"2026-11-21T17:25:36Z","method":"notify","response_body":{"result":"r","parts":[{"kind":"file","file":{"uri":"u"}}]}}`,
		`{"id":"x","created_at":"2026-11-21T17:25:36Z","method":"chat_upload_receive","request_body":{"uri":"u","size":1e300}}`,
		`{"id":"x","created_at":"2026-11-21T17:25:36Z","source_id":"` + wsA + `","request_body":{"params":{"message":{"metadata":{"relay_hops":-0.0,"in_reply_to":"y"},"parts":[{"type":"text","text":"\ud800"}]}}}}`,
		`{"id":"x","created_at":"2026-11-21T17:25:36Z","request_body":{"parts":[{"kind":"file","uri":"u","name":"n"}]},"attachments":[{"uri":"u"},{"uri":"v","mime_type":1}]}`,
	} {
		f.Add([]byte(s), wsA)
	}
	f.Fuzz(func(t *testing.T, raw []byte, self string) {
		in := bytes.Clone(raw)
		m, err := molecule.ParseRow(json.RawMessage(raw), self)
		if !bytes.Equal(raw, in) {
			t.Fatal("ParseRow modified its input")
		}
		if err != nil {
			if m != nil {
				t.Fatal("message and error both returned")
			}
			if !errors.Is(err, molecule.ErrMalformedRow) {
				t.Fatalf("error %v does not match ErrMalformedRow", err)
			}
			var re *molecule.RowError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RowError", err)
			}
			_ = err.Error()
			return
		}
		if m == nil {
			t.Fatal("nil message and nil error")
		}
		if m.ActivityID == "" {
			t.Fatal("message without an id")
		}
		if !bytes.Equal(m.Raw, raw) {
			t.Fatal("Raw differs from the input")
		}
		if !json.Valid(raw) {
			t.Fatal("invalid JSON accepted")
		}
		switch {
		case m.Method == "notify" && m.Kind != molecule.KindOwnNotify,
			m.Method == "chat_upload_receive" && m.Kind != molecule.KindUpload,
			m.Method != "notify" && m.Method != "chat_upload_receive" && m.Kind != molecule.KindMessage:
			t.Fatalf("method %q classified as kind %d", m.Method, m.Kind)
		}
		switch m.Sender {
		case molecule.SenderCanvasUser, molecule.SenderCron:
			if m.SourceID != "" {
				t.Fatalf("sender %d with source %q", m.Sender, m.SourceID)
			}
		case molecule.SenderSelf:
			if self == "" || m.SourceID == "" {
				t.Fatalf("self sender with source %q, self %q", m.SourceID, self)
			}
		case molecule.SenderPeer:
			if m.SourceID == "" {
				t.Fatal("peer sender without a source")
			}
		default:
			t.Fatalf("unknown sender %d", m.Sender)
		}
		if m.Hops < 0 {
			t.Fatalf("negative hops %d", m.Hops)
		}
		for _, a := range m.Attachments {
			if a.Size < 0 {
				t.Fatalf("negative size %d", a.Size)
			}
		}
		_ = m.Skip(true)
		_ = m.Skip(false)
		// A parse is deterministic.
		again, err := molecule.ParseRow(m.Raw, self)
		if err != nil || again.Text != m.Text || again.Sender != m.Sender || len(again.Attachments) != len(m.Attachments) {
			t.Fatalf("re-parse differs: %v", err)
		}
	})
}
