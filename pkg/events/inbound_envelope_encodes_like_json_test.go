package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Inbound.Marshal against json.Marshal (envelope_encoding_helpers_test.go).

var inboundFixtureNames = []string{"inbound_canvas", "inbound_cron", "inbound_peer"}

func inboundFixtures(t testing.TB) []events.Inbound {
	return fixtures[events.Inbound](t, inboundFixtureNames...)
}

func TestInboundEnvelopeEncodesLikeJSON(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 0, 0, 123456789, time.UTC)
	att := []events.Attachment{{URI: "https://files.example/a.png", Name: "a.png", MimeType: "image/png", Size: 2048}, {URI: "s3://b/k?x=1&y=<2>", Name: "naïve \"n\""}}
	ins := append(inboundFixtures(t),
		events.Inbound{},
		events.Inbound{V: 9, WorkspaceID: "ws", ActivityID: "act", Source: events.SourcePeerAgent, SourceWorkspaceID: "peer", Method: "message/send",
			MessageID: "m", Role: "user", Text: "say \"hi\" <b>&\n\u2028\xff é", Attachments: att, Cron: true, Kind: events.KindBroadcast, InReplyTo: "r", InReplyToMessageID: "q",
			ContextID: "c", TaskID: "t", Hops: -3, PeerName: "Peer <1>", PeerRole: "worker", AgentCardURL: "https://p/card?a=1&b=2",
			Raw: json.RawMessage("{ \"id\": \"act\",\n \"n\": [1, 2] }"), CreatedAt: at.In(time.FixedZone("x", -3600)), PolledAt: at},
		events.Inbound{Text: "row with html", Raw: json.RawMessage(`{"t":"<b>"}`), CreatedAt: at, PolledAt: at},
		events.Inbound{Text: "row json.Marshal rejects", Raw: json.RawMessage(`{"t":`), CreatedAt: at, PolledAt: at},
		events.Inbound{Text: "empty row and list", Raw: json.RawMessage{}, Attachments: []events.Attachment{}},
		events.Inbound{Text: "zone json.Marshal refuses", PolledAt: at.In(time.FixedZone("z", -24*3600))},
		events.Inbound{Text: "local time", CreatedAt: time.Now(), PolledAt: time.Now()},
	)
	for i, in := range ins {
		checkInboundEncoding(t, i, in)
	}
}

// FuzzInboundEnvelopeEncodesLikeJSON: arbitrary texts, ids, an activity
// row of any bytes, hops, times (any instant and zone offset) and an
// attachment, against json.Marshal.
func FuzzInboundEnvelopeEncodesLikeJSON(f *testing.F) {
	f.Add("ws", "act", "canvas_user", "hello", "m", []byte(`{"id":"act"}`), 0, false, int64(1795000000123456789), 0, "", "", "", int64(0))
	f.Add("ws", "act", "peer_agent", "say \"hi\" <b>\n", "", []byte("{ \"a\": [1, 2]\n}"), 3, true, int64(0), 3600, "https://x/a.png", "a.png", "image/png", int64(12))
	f.Add("\xff", "\u2028", "&", "é", "<", []byte(`{"x":"<"}`), -1, true, int64(-62135596800000000000/1000), 86400, "<", ">", "&", int64(-1))
	f.Fuzz(func(t *testing.T, ws, act, source, text, id string, raw []byte, hops int, cron bool, unixNano int64, offset int, uri, name, mime string, size int64) {
		at := time.Unix(0, unixNano).In(time.FixedZone("f", offset%(48*3600)))
		checkInboundEncoding(t, 0, events.Inbound{WorkspaceID: ws, ActivityID: act, Source: events.Source(source), SourceWorkspaceID: id,
			Method: name, MessageID: id, Role: mime, Text: text, Attachments: []events.Attachment{{URI: uri, Name: name, MimeType: mime, Size: size}},
			Cron: cron, InReplyTo: act, InReplyToMessageID: id, ContextID: ws, TaskID: text, Hops: hops, PeerName: name, PeerRole: uri,
			AgentCardURL: uri, Raw: raw, CreatedAt: at, PolledAt: at.Add(time.Duration(size))})
	})
}

func checkInboundEncoding(t *testing.T, i int, in events.Inbound) {
	t.Helper()
	stamped := in
	stamped.V = events.Version
	checkEncodesLikeJSON(t, "inbound", i, in, stamped)
}

// BenchmarkInboundMarshal: the inbound fixtures, by hand and by
// json.Marshal.
func BenchmarkInboundMarshal(b *testing.B) {
	benchmarkMarshal(b, inboundFixtureNames, inboundFixtures(b))
}
