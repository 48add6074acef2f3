package events_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Reply.Marshal against json.Marshal (envelope_encoding_helpers_test.go).

var replyFixtureNames = []string{"reply_canvas", "reply_peer"}

func replyFixtures(t testing.TB) []events.Reply {
	return fixtures[events.Reply](t, replyFixtureNames...)
}

func TestReplyEnvelopeEncodesLikeJSON(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 0, 0, 123456789, time.UTC)
	att := []events.Attachment{{URI: "https://files.example/a.png", Name: "a.png", MimeType: "image/png", Size: 2048}, {URI: "s3://b/k?x=1&y=<2>", Name: "naïve \"n\""}}
	reps := append(replyFixtures(t),
		events.Reply{},
		events.Reply{WorkspaceID: "ws", ActivityID: "act", Source: events.SourceCanvasUser, Text: "hi", InboundCreatedAt: at, HandledAt: at},
		events.Reply{V: 7, WorkspaceID: "ws", ActivityID: "act", Source: events.SourcePeerAgent, TargetWorkspaceID: "peer", Text: "say \"hi\" <b>&\n\u2028\xff",
			Attachments: att, MessageID: "m", InReplyToMessageID: "q", ContextID: "c", TaskID: "t", Hops: -2, Conversation: "canvas",
			InboundText: "é 日本語 🎉", InboundAttachments: att[:1], InboundCreatedAt: at.In(time.FixedZone("x", 5*3600+1800)), PolledAt: at, HandledAt: at.Truncate(time.Second)},
		events.Reply{Text: "empty lists", Attachments: []events.Attachment{}, InboundAttachments: []events.Attachment{}},
		events.Reply{Text: "zone json.Marshal refuses", HandledAt: at.In(time.FixedZone("z", 24*3600))},
		events.Reply{Text: "year json.Marshal refuses", PolledAt: at.AddDate(9000, 0, 0)},
		events.Reply{Text: "local time", HandledAt: time.Now()},
	)
	for i, rep := range reps {
		checkReplyEncoding(t, i, rep)
	}
}

// FuzzReplyEnvelopeEncodesLikeJSON: arbitrary texts, ids, hops, times (any
// instant and zone offset) and an attachment, against json.Marshal.
func FuzzReplyEnvelopeEncodesLikeJSON(f *testing.F) {
	f.Add("ws", "act", "canvas_user", "hello", "canvas", "question", 0, int64(1795000000123456789), 0, "", "", "", int64(0))
	f.Add("ws", "act", "peer_agent", "say \"hi\" <b>\n", "", "", 3, int64(0), 3600, "https://x/a.png", "a.png", "image/png", int64(12))
	f.Add("\xff", "\u2028", "&", "é", "<", ">", -1, int64(-62135596800000000000/1000), 86400, "<", ">", "&", int64(-1))
	f.Fuzz(func(t *testing.T, ws, act, source, text, conv, inText string, hops int, unixNano int64, offset int, uri, name, mime string, size int64) {
		at := time.Unix(0, unixNano).In(time.FixedZone("f", offset%(48*3600)))
		att := []events.Attachment{{URI: uri, Name: name, MimeType: mime, Size: size}}
		checkReplyEncoding(t, 0, events.Reply{WorkspaceID: ws, ActivityID: act, Source: events.Source(source), TargetWorkspaceID: conv,
			Text: text, Attachments: att, MessageID: inText, InReplyToMessageID: act, ContextID: ws, TaskID: text, Hops: hops,
			Conversation: conv, InboundText: inText, InboundAttachments: att, InboundCreatedAt: at, PolledAt: at.Add(time.Duration(size)), HandledAt: at})
	})
}

func checkReplyEncoding(t *testing.T, i int, rep events.Reply) {
	t.Helper()
	stamped := rep
	stamped.V = events.Version
	checkEncodesLikeJSON(t, "reply", i, rep, stamped)
}

// BenchmarkReplyMarshal: the reply fixtures, by hand and by json.Marshal.
func BenchmarkReplyMarshal(b *testing.B) {
	benchmarkMarshal(b, replyFixtureNames, replyFixtures(b))
}
