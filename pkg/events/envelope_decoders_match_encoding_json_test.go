package events

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The hand decoders of Inbound and Reply must give json.Unmarshal's
// result whenever they accept an input, and accept what json.Marshal
// writes (else they save nothing).

// readableEnvelopes are inputs the hand path must read: the fixtures of
// inbound and reply envelopes, envelopes as json.Marshal writes them, and
// a few more shapes of valid envelopes.
func readableEnvelopes(t testing.TB) [][]byte {
	var in [][]byte
	for _, pattern := range []string{"testdata/inbound_*.json", "testdata/reply_*.json"} {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			t.Fatalf("fixtures %s: %v (%d files)", pattern, err, len(files))
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			in = append(in, b)
		}
	}
	at := time.Date(2026, 11, 26, 21, 40, 0, 123456789, time.FixedZone("x", 3600))
	full := Inbound{WorkspaceID: "ws", ActivityID: "a1", Source: SourcePeerAgent, SourceWorkspaceID: "peer",
		Method: "message/send", MessageID: "m", Role: "user", Text: "line\nwith \"quotes\" <tags> & é 😀",
		Attachments: []Attachment{{URI: "u", Name: "n", MimeType: "text/plain", Size: 5}}, Cron: true, Kind: KindBroadcast,
		InReplyTo: "x", InReplyToMessageID: "y", ContextID: "c", TaskID: "t", Hops: 3, PeerName: "p",
		PeerRole: "r", AgentCardURL: "https://a", Raw: json.RawMessage(`{"id":"a1","n":[1,{"s":"}"}]}`),
		CreatedAt: at, PolledAt: at.Add(time.Millisecond)}
	rep := Reply{WorkspaceID: "ws", ActivityID: "a1", Source: SourcePeerAgent, TargetWorkspaceID: "peer",
		Text: "answer", Attachments: []Attachment{{URI: "u", Name: "n"}}, MessageID: "m",
		InReplyToMessageID: "y", ContextID: "c", TaskID: "t", Hops: 4, Conversation: "conv",
		InboundText: "q", InboundAttachments: []Attachment{}, InboundCreatedAt: at, PolledAt: at, HandledAt: at}
	for _, v := range []interface{ Marshal() ([]byte, error) }{full, rep, Inbound{WorkspaceID: "w", ActivityID: "a"}, Reply{WorkspaceID: "w", ActivityID: "a", Source: SourceCanvasUser}} {
		b, err := v.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, b)
	}
	for _, s := range []string{
		`{"v":1,"workspace_id":"w","activity_id":"a","text":"a\nb\u00e9\ud83d\ude00\/"}`,
		"{\"v\":1,\"workspace_id\":\"w\",\"activity_id\":\"a\",\"text\":\"bad \xff utf8\"}",
		` { "v" : 1 , "workspace_id" : "w" , "activity_id" : "a" , "raw" : [ 1 , "}" ] } `,
		`{"v":-0,"workspace_id":"w","activity_id":"a"}`,
		`{}`,
	} {
		in = append(in, []byte(s))
	}
	return in
}

// declinedEnvelopes are inputs the hand path must leave to json.Unmarshal.
var declinedEnvelopes = []string{
	`{"v":1,"workspace_id":"w","activity_id":"a","Text":"case folded"}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","text":"one","text":"two"}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","attachments":[{"uri":"a","size":5}],"attachments":[{"uri":"b"}]}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","hops":1.0}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","hops":1e2}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","hops":99999999999999999999}`,
	`{"v":"1","workspace_id":"w","activity_id":"a"}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","raw":null}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","text":null}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","cron":null}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","t\u0065xt":"escaped key"}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","extra":{"x":[1,2]}}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","created_at":"2026-13-01T00:00:00Z"}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","created_at":""}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","created_at":12}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","cron":"true"}`,
	`{"v":1,"workspace_id":"w","activity_id":"a","attachments":{}}`,
	`{"v":1,"workspace_id":"w","activity_id":"a",}`,
	`{"v":1,"workspace_id":"w","activity_id":"a"} {}`,
	`null`, `[]`, `"x"`, ``, `{`,
}

// checkEnvelopeDecoders fails t when a hand decoder accepts data and its
// result differs from json.Unmarshal's, or json.Unmarshal refuses it.
func checkEnvelopeDecoders(t *testing.T, data []byte) {
	var fastIn, wantIn Inbound
	if decodeInboundFast(data, &fastIn) {
		if err := json.Unmarshal(data, &wantIn); err != nil {
			t.Errorf("Inbound: the hand decoder accepted what json.Unmarshal refuses (%v): %q", err, data)
		} else if !reflect.DeepEqual(fastIn, wantIn) {
			t.Errorf("Inbound of %q:\nhand %+v\njson %+v", data, fastIn, wantIn)
		}
	}
	var fastRep, wantRep Reply
	if decodeReplyFast(data, &fastRep) {
		if err := json.Unmarshal(data, &wantRep); err != nil {
			t.Errorf("Reply: the hand decoder accepted what json.Unmarshal refuses (%v): %q", err, data)
		} else if !reflect.DeepEqual(fastRep, wantRep) {
			t.Errorf("Reply of %q:\nhand %+v\njson %+v", data, fastRep, wantRep)
		}
	}
}

func TestEnvelopeDecodersMatchEncodingJSON(t *testing.T) {
	for _, data := range readableEnvelopes(t) {
		checkEnvelopeDecoders(t, data)
	}
	for _, s := range declinedEnvelopes {
		checkEnvelopeDecoders(t, []byte(s))
	}
}

// What json.Marshal writes is read by the hand path (the fixtures'
// indentation included), and what it must not read is declined: a
// decoder that declined everything would pass the test above and save
// nothing.
func TestEnvelopeDecodersReadWhatMarshalWrites(t *testing.T) {
	for _, data := range readableEnvelopes(t) {
		var in Inbound
		var rep Reply
		if !decodeInboundFast(data, &in) && !decodeReplyFast(data, &rep) {
			t.Errorf("neither hand decoder read %s", data)
		}
	}
	for _, s := range declinedEnvelopes {
		var in Inbound
		var rep Reply
		if decodeInboundFast([]byte(s), &in) || decodeReplyFast([]byte(s), &rep) {
			t.Errorf("a hand decoder read %s; it must be left to json.Unmarshal", s)
		}
	}
}

func FuzzEnvelopeDecodersMatchEncodingJSON(f *testing.F) {
	for _, data := range readableEnvelopes(f) {
		f.Add(data)
	}
	for _, s := range declinedEnvelopes {
		f.Add([]byte(s))
	}
	f.Fuzz(checkEnvelopeDecoders)
}
