package memory

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A stored message's turns are encoded by hand (encodeTurns) and must be
// byte for byte what json.Marshal writes, its error too, also for the
// values the hand encoder leaves to json.Marshal.

func turnEncoderCases() [][]handler.Turn {
	at := time.Date(2026, 11, 27, 3, 0, 0, 123456789, time.UTC)
	att := []events.Attachment{
		{URI: "https://files.example/a.png", Name: "a.png", MimeType: "image/png", Size: 2048},
		{URI: "s3://bucket/k?x=1&y=<2>", Name: "naïve \"name\""},
	}
	return [][]handler.Turn{
		nil,
		{},
		{{}},
		{{Role: handler.RoleUser, Text: "hello", ActivityID: "act-1", At: at}},
		{{Role: handler.RoleUser, Text: "say \"hi\" <now> & then\n\ttab", ActivityID: "act-2", At: at.Truncate(time.Second)},
			{Role: handler.RoleAgent, Text: "é 日本語 🎉 \u2028 \xff bad", ActivityID: "act-2", At: at.In(time.FixedZone("x", -(5*3600 + 30*60)))}},
		{{Role: handler.RoleAgent, Text: "with files", Attachments: att, At: at}},
		{{Role: handler.RoleUser, Text: "empty attachments", Attachments: []events.Attachment{}}},
		{{Role: handler.RoleUser, Text: "zone json.Marshal refuses", At: at.In(time.FixedZone("z", 24*3600))}},
		{{Role: handler.RoleUser, Text: "year json.Marshal refuses", At: at.AddDate(8000, 0, 0)}},
		{{Role: handler.RoleUser, Text: "local time", At: time.Now()}},
	}
}

func TestTurnEncoderMatchesJSON(t *testing.T) {
	for i, turns := range turnEncoderCases() {
		checkTurnEncoding(t, i, turns)
	}
}

// FuzzTurnEncoderMatchesJSON: two turns of arbitrary texts, ids, times
// (any instant, any zone offset) and an attachment, against json.Marshal.
func FuzzTurnEncoderMatchesJSON(f *testing.F) {
	f.Add("user", "hello", "act-1", int64(1795000000123456789), 0, "", "", "", int64(0))
	f.Add("agent", "say \"hi\" <b>\n", "", int64(0), 3600, "https://x/a.png", "a.png", "image/png", int64(12))
	f.Add("user", "\xff\u2028é", "a&b", int64(-62135596800000000000/1000), 86400, "<", ">", "&", int64(-1))
	f.Fuzz(func(t *testing.T, role, text, activity string, unixNano int64, offset int, uri, name, mime string, size int64) {
		at := time.Unix(0, unixNano).In(time.FixedZone("f", offset%(48*3600)))
		turns := []handler.Turn{
			{Role: role, Text: text, ActivityID: activity, At: at},
			{Role: text, Text: role, Attachments: []events.Attachment{{URI: uri, Name: name, MimeType: mime, Size: size}}, ActivityID: activity},
		}
		checkTurnEncoding(t, 0, turns)
	})
}

func checkTurnEncoding(t *testing.T, i int, turns []handler.Turn) {
	t.Helper()
	got, gotErr := encodeTurns(turns)
	want, wantErr := json.Marshal(turns)
	if (gotErr == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Errorf("case %d: encodeTurns = %s, %v\njson.Marshal = %s, %v", i, got, gotErr, want, wantErr)
	}
	for j, turn := range turns {
		b, err := json.Marshal(turn)
		if want := len(b); err != nil {
			want = 0
			if n := turnSize(turn); n != want {
				t.Errorf("case %d turn %d: turnSize = %d, want %d", i, j, n, want)
			}
		} else if n := turnSize(turn); n != want {
			t.Errorf("case %d turn %d: turnSize = %d, want len(json.Marshal) %d", i, j, n, want)
		}
	}
}

// BenchmarkEncodeTurns: a recorded reply's two turns (the user's and the
// agent's), as Record writes them.
func BenchmarkEncodeTurns(b *testing.B) {
	at := time.Date(2026, 11, 27, 3, 0, 0, 123456789, time.UTC)
	turns := []handler.Turn{
		{Role: handler.RoleUser, Text: "What is the status of the deploy to staging?", ActivityID: "7f3c9a10-0000-4000-8000-000000000001", At: at},
		{Role: handler.RoleAgent, Text: "echo: What is the status of the deploy to staging?", ActivityID: "7f3c9a10-0000-4000-8000-000000000001", At: at.Add(time.Millisecond)},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeTurns(turns); err != nil {
			b.Fatal(err)
		}
	}
}
