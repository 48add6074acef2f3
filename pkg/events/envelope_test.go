package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameJSON reports whether a and b hold the same JSON value, ignoring
// formatting and key order.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("unmarshal %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func compact(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	if raw == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return buf.Bytes()
}

// roundTrip checks fixture → decode → encode → decode: the two decoded
// values are equal and the encoding holds exactly the fixture's JSON (no
// field lost or invented).
func roundTrip[T any](t *testing.T, fixture string, decodeFn func([]byte) (*T, error), encodeFn func(T) ([]byte, error), norm func(*T)) *T {
	t.Helper()
	in := readFixture(t, fixture)
	if !sameJSON(t, in, in) || !bytes.Contains(in, []byte(`"v": 1`)) {
		t.Fatalf("%s: fixture must be JSON with v=1", fixture)
	}
	first, err := decodeFn(in)
	if err != nil {
		t.Fatalf("%s: decode: %v", fixture, err)
	}
	out, err := encodeFn(*first)
	if err != nil {
		t.Fatalf("%s: encode: %v", fixture, err)
	}
	if !sameJSON(t, in, out) {
		t.Fatalf("%s: encoding differs from the fixture\nfixture: %s\nencoded: %s", fixture, in, out)
	}
	second, err := decodeFn(out)
	if err != nil {
		t.Fatalf("%s: decode encoded: %v", fixture, err)
	}
	norm(first)
	norm(second)
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("%s: round trip changed the value\nfirst:  %+v\nsecond: %+v", fixture, first, second)
	}
	return second
}

func TestInboundRoundTrip(t *testing.T) {
	norm := func(m *events.Inbound) { m.Raw = compact(t, m.Raw) }
	for _, f := range []string{"inbound_canvas.json", "inbound_peer.json", "inbound_cron.json"} {
		t.Run(f, func(t *testing.T) {
			m := roundTrip(t, f, events.DecodeInbound, events.Inbound.Marshal, norm)
			if m.V != events.Version || m.WorkspaceID == "" || m.ActivityID == "" || m.Text == "" || m.CreatedAt.IsZero() || m.PolledAt.IsZero() {
				t.Fatalf("decoded %+v", m)
			}
		})
	}
	// Spot-check field mapping on the richest fixture.
	m, err := events.DecodeInbound(readFixture(t, "inbound_peer.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := events.Attachment{URI: "platform-pending:35637291-d55e-4553-896c-13c2e02fe4f7/f-1", Name: "app.log", MimeType: "text/plain", Size: 20480}
	if m.Source != events.SourcePeerAgent || m.SourceWorkspaceID != "e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b" ||
		m.Hops != 2 || m.InReplyTo == "" || m.PeerName != "log-collector" || len(m.Attachments) != 2 || m.Attachments[0] != want ||
		!m.CreatedAt.Equal(time.Date(2026, 5, 12, 9, 20, 0, 250_000_000, time.UTC)) {
		t.Fatalf("inbound_peer decoded as %+v", m)
	}
	cron, err := events.DecodeInbound(readFixture(t, "inbound_cron.json"))
	if err != nil || !cron.Cron || cron.Raw != nil {
		t.Fatalf("inbound_cron: %+v, %v", cron, err)
	}
}

func TestReplyRoundTrip(t *testing.T) {
	for _, f := range []string{"reply_canvas.json", "reply_peer.json"} {
		t.Run(f, func(t *testing.T) {
			roundTrip(t, f, events.DecodeReply, events.Reply.Marshal, func(*events.Reply) {})
		})
	}
	r, err := events.DecodeReply(readFixture(t, "reply_peer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != events.SourcePeerAgent || r.TargetWorkspaceID == "" || r.MessageID == "" || r.Hops != 3 || !r.PolledAt.IsZero() {
		t.Fatalf("reply_peer decoded as %+v", r)
	}
}

func TestDeadLetterRoundTrip(t *testing.T) {
	norm := func(m *events.DeadLetter) { m.Envelope = compact(t, m.Envelope) }
	for _, f := range []string{"deadletter.json", "deadletter_malformed.json"} {
		t.Run(f, func(t *testing.T) {
			roundTrip(t, f, events.DecodeDeadLetter, events.DeadLetter.Marshal, norm)
		})
	}
	// The recorded envelope decodes as the inbound message it was.
	dl, err := events.DecodeDeadLetter(readFixture(t, "deadletter.json"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := events.DecodeInbound(dl.Envelope)
	if err != nil || in.ActivityID != dl.ActivityID || dl.OriginalSubject != events.InboundSubject(in.WorkspaceID) {
		t.Fatalf("dead letter envelope: %+v, %v", in, err)
	}
	if dl.Reason != events.ReasonMaxDeliveries || dl.Deliveries != 5 || dl.OriginalStream != events.StreamInbound {
		t.Fatalf("dead letter decoded as %+v", dl)
	}
}

// A dead letter's Envelope is a json.RawMessage, so an original envelope
// that is not JSON (ReasonMalformed) cannot be stored byte for byte: Marshal
// refuses it. The stage must store such bytes as a JSON string, as the
// deadletter_malformed.json fixture does.
func TestDeadLetterEnvelopeMustBeJSON(t *testing.T) {
	dl := events.DeadLetter{Stage: events.StageReplier, WorkspaceID: "w", Reason: events.ReasonMalformed, Envelope: json.RawMessage(`{"v":1,"workspace_id"`)}
	if _, err := dl.Marshal(); err == nil {
		t.Fatal("Marshal accepted a non-JSON envelope")
	}
	quoted, _ := json.Marshal(`{"v":1,"workspace_id"`)
	dl.Envelope = quoted
	if _, err := dl.Marshal(); err != nil {
		t.Fatalf("Marshal of a quoted envelope: %v", err)
	}
}

func TestMarshalStampsVersion(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name string
		enc  func() ([]byte, error)
	}{
		{"inbound", events.Inbound{V: 7, WorkspaceID: "w", ActivityID: "a", CreatedAt: ts}.Marshal},
		{"reply", events.Reply{WorkspaceID: "w", ActivityID: "a", Source: events.SourceCanvasUser}.Marshal},
		{"deadletter", events.DeadLetter{V: -3, Stage: "poller", Envelope: json.RawMessage(`{}`)}.Marshal},
	} {
		b, err := tt.enc()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var v struct{ V int }
		if err := json.Unmarshal(b, &v); err != nil || v.V != events.Version {
			t.Fatalf("%s: encoded %s, want v=%d", tt.name, b, events.Version)
		}
	}
}

func TestVersionRefused(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"inbound": func(b []byte) error { _, err := events.DecodeInbound(b); return err },
		"reply":   func(b []byte) error { _, err := events.DecodeReply(b); return err },
		"deadletter": func(b []byte) error {
			_, err := events.DecodeDeadLetter(b)
			return err
		},
	}
	fixtures := map[string]string{"inbound": "inbound_canvas.json", "reply": "reply_canvas.json", "deadletter": "deadletter.json"}
	for kind, decodeFn := range decoders {
		good := readFixture(t, fixtures[kind])
		for _, tt := range []struct {
			name    string
			version string // replacement of `"v": 1`; "" removes it
		}{
			{"missing", ""},
			{"zero", `"v": 0`},
			{"negative", `"v": -1`},
			{"newer", `"v": 2`},
			{"far future", `"v": 99`},
		} {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				var data []byte
				if tt.version == "" {
					data = bytes.Replace(good, []byte(`"v": 1,`), nil, 1)
				} else {
					data = bytes.Replace(good, []byte(`"v": 1`), []byte(tt.version), 1)
				}
				if bytes.Equal(data, good) {
					t.Fatal("fixture not modified")
				}
				err := decodeFn(data)
				if !errors.Is(err, events.ErrUnsupportedVersion) {
					t.Fatalf("decode = %v, want ErrUnsupportedVersion", err)
				}
			})
		}
		t.Run(kind+"/not json", func(t *testing.T) {
			err := decodeFn([]byte(`{"v":1,`))
			if err == nil || errors.Is(err, events.ErrUnsupportedVersion) {
				t.Fatalf("decode of truncated JSON = %v, want a decode error", err)
			}
		})
	}
}

func TestDecodeInboundValidation(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		ok         bool
	}{
		{"minimal", `{"v":1,"workspace_id":"w","activity_id":"a"}`, true},
		{"no workspace", `{"v":1,"activity_id":"a"}`, false},
		{"no activity", `{"v":1,"workspace_id":"w"}`, false},
		{"wrong type", `{"v":1,"workspace_id":"w","activity_id":"a","hops":"x"}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.DecodeInbound([]byte(tt.data))
			if (err == nil) != tt.ok {
				t.Fatalf("DecodeInbound(%s) = %v, want ok=%v", tt.data, err, tt.ok)
			}
		})
	}
}

func TestDecodeReplyValidation(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		ok         bool
		want       string // substring of the error
	}{
		{"canvas", `{"v":1,"workspace_id":"w","activity_id":"a","source":"canvas_user","text":"hi"}`, true, ""},
		{"self", `{"v":1,"workspace_id":"w","activity_id":"a","source":"self"}`, true, ""},
		{"peer with target", `{"v":1,"workspace_id":"w","activity_id":"a","source":"peer_agent","target_workspace_id":"p"}`, true, ""},
		{"empty text is allowed", `{"v":1,"workspace_id":"w","activity_id":"a","source":"canvas_user","text":""}`, true, ""},
		{"peer without target", `{"v":1,"workspace_id":"w","activity_id":"a","source":"peer_agent"}`, false, "target_workspace_id"},
		{"no source", `{"v":1,"workspace_id":"w","activity_id":"a"}`, false, "unknown source"},
		{"unknown source", `{"v":1,"workspace_id":"w","activity_id":"a","source":"martian"}`, false, "martian"},
		{"no workspace", `{"v":1,"activity_id":"a","source":"canvas_user"}`, false, "workspace_id"},
		{"no activity", `{"v":1,"workspace_id":"w","source":"canvas_user"}`, false, "activity_id"},
		{"array", `[1,2]`, false, "decode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := events.DecodeReply([]byte(tt.data))
			if tt.ok {
				if err != nil || r == nil {
					t.Fatalf("DecodeReply: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeReply(%s) = %v, want an error mentioning %q", tt.data, err, tt.want)
			}
		})
	}
}

var uuidV5 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestReplyMessageID(t *testing.T) {
	// Golden values computed outside Go (Python hashlib): a change here
	// would make the platform see every re-sent reply as new.
	golden := map[string]string{
		"9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1b": "e7c3aa1d-0a06-56d0-8085-fe3db4cc2b64",
		"x":                                    "e1cfbc55-4d5d-5b1f-86d4-f5cf38f41c17",
	}
	for in, want := range golden {
		if got := events.ReplyMessageID(in); got != want {
			t.Errorf("ReplyMessageID(%q) = %s, want %s", in, got, want)
		}
	}
	seen := map[string]string{}
	for _, a := range []string{"", "a", "b", "9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1b", "9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1c", strings.Repeat("z", 1000)} {
		id := events.ReplyMessageID(a)
		if !uuidV5.MatchString(id) {
			t.Errorf("ReplyMessageID(%q) = %s: not a version-5, RFC 4122 variant UUID", a, id)
		}
		if id != events.ReplyMessageID(a) {
			t.Errorf("ReplyMessageID(%q) not stable", a)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("ReplyMessageID(%q) = ReplyMessageID(%q) = %s", a, prev, id)
		}
		seen[id] = a
	}
}
