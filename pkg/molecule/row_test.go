package molecule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

const (
	wsA = "35637291-d55e-4553-896c-13c2e02fe4f7"
	wsB = "b48f61e0-7c1d-4b6e-9a55-2f0c3e8d1a94"
	// wsOld is the workspace of the OLD-platform fixtures.
	wsOld = "7d3f2a91-5b6c-4e8d-a1f0-3c2b9e8d7a65"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "rows", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseRowFixtures(t *testing.T) {
	queuedA := "message/send → ext-A (queued for poll)"
	tests := []struct {
		file string
		self string
		want molecule.Message
		skip string // Skip(false)
	}{
		{
			file: "canvas_new.json", self: wsA,
			want: molecule.Message{
				ActivityID: "6af0b425-9c93-48bf-ac04-a9c98df27fdb", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderCanvasUser,
				Text: "hello from canvas 1", MessageID: "d30a282b-5e4f-4a8c-b1d2-7c6e9f0a3b15", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:25:36.745773Z"),
			},
		},
		{
			file: "peer_new.json", self: wsA,
			want: molecule.Message{
				ActivityID: "0c5d7e21-4b8a-4f3e-9a61-d2b7c8e5f901", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", SourceID: wsB, TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderPeer,
				Text: "hello A, this is B", MessageID: "4b1e8f2a-9c3d-4e5f-8a7b-1c2d3e4f5a6b", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:25:41.208114Z"),
			},
		},
		{
			file: "notify_new.json", self: wsA, skip: molecule.SkipOwnNotify,
			want: molecule.Message{
				ActivityID: "183efc04-6d2b-4a9e-b5c1-3f8e7d6a2b90", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "notify", Summary: "Agent message: Hello user, reply from A", Status: "ok",
				Kind: molecule.KindOwnNotify, Sender: molecule.SenderCanvasUser,
				Text:      "Hello user, reply from A",
				CreatedAt: mustTime(t, "2026-11-21T17:26:26.516866Z"),
			},
		},
		{
			file: "notify_old_attachments.json", self: wsOld, skip: molecule.SkipOwnNotify,
			want: molecule.Message{
				ActivityID: "b9db4bde-2a7c-4d1f-8e3b-5c6a9f0d1e24", WorkspaceID: wsOld, ActivityType: "a2a_receive",
				Method: "notify", Summary: "Agent message: reply to canvas: hi user", Status: "ok",
				Kind: molecule.KindOwnNotify, Sender: molecule.SenderCanvasUser,
				Text: "reply to canvas: hi user",
				Attachments: []molecule.Attachment{
					{URI: "workspace:/uploads/report.pdf", Name: "report.pdf", MimeType: "application/pdf", Size: 48213},
				},
				CreatedAt: mustTime(t, "2026-11-21T17:12:04.118302Z"),
			},
		},
		{
			file: "canvas_old_delivered.json", self: wsOld,
			want: molecule.Message{
				ActivityID: "7575ba33-05c1-4946-adc8-9f4d0549ce36", WorkspaceID: wsOld, ActivityType: "a2a_receive",
				Method: "message/send", Summary: "message/send → ext-agent-A", Status: "ok", TargetID: wsOld,
				Kind: molecule.KindMessage, Sender: molecule.SenderCanvasUser,
				Text: "hello from canvas", MessageID: "m-canvas-1", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:10:51.546217Z"),
			},
		},
		{
			file: "canvas_old_failed.json", self: "2c8e5a1d-9f3b-4d6e-8a7c-1b0f4e3d2c95",
			want: molecule.Message{
				ActivityID: "e41c0b6f-8d2a-4c57-b93e-0a6f1d2c8b47", WorkspaceID: "2c8e5a1d-9f3b-4d6e-8a7c-1b0f4e3d2c95",
				ActivityType: "a2a_receive", Method: "message/send",
				Summary: `A2A request to ext-agent-D failed: Post "http://localhost:9199": dial tcp 127.0.0.1:9199: connect: connection refused`,
				Status:  "error", TargetID: "2c8e5a1d-9f3b-4d6e-8a7c-1b0f4e3d2c95",
				Kind: molecule.KindMessage, Sender: molecule.SenderCanvasUser,
				Text: "are you there?", MessageID: "m-canvas-2", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:14:22.907651Z"),
			},
		},
		{
			file: "self_new.json", self: wsA, skip: molecule.SkipSelf,
			want: molecule.Message{
				ActivityID: "9d4a6c2e-3b1f-4e8a-a5d7-6c0b9e2f1a38", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", SourceID: wsA, TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderSelf,
				Text: "wake up, A", MessageID: "8f0e2d4c-6b1a-4f3e-9d5c-7a2b0e4f6c81", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:25:58.031442Z"),
			},
		},
		{
			// The self id compares case-insensitively (UUIDs in config may be upper case).
			file: "self_new.json", self: strings.ToUpper(wsA), skip: molecule.SkipSelf,
			want: molecule.Message{
				ActivityID: "9d4a6c2e-3b1f-4e8a-a5d7-6c0b9e2f1a38", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", SourceID: wsA, TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderSelf,
				Text: "wake up, A", MessageID: "8f0e2d4c-6b1a-4f3e-9d5c-7a2b0e4f6c81", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:25:58.031442Z"),
			},
		},
		{
			// Seen from B, A's self-message row is just a peer row.
			file: "self_new.json", self: wsB,
			want: molecule.Message{
				ActivityID: "9d4a6c2e-3b1f-4e8a-a5d7-6c0b9e2f1a38", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", SourceID: wsA, TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderPeer,
				Text: "wake up, A", MessageID: "8f0e2d4c-6b1a-4f3e-9d5c-7a2b0e4f6c81", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:25:58.031442Z"),
			},
		},
		{
			file: "cron_new.json", self: wsA,
			want: molecule.Message{
				ActivityID: "5e7b9d1f-2c4a-4b6e-8d0f-1a3c5e7b9d24", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderCron,
				Text: "Daily standup: summarise open tasks", MessageID: "cron-4f2a9c1e-7b3d0e58", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T18:00:00.012873Z"),
			},
		},
		{
			file: "upload_new.json", self: wsA, skip: molecule.SkipUpload,
			want: molecule.Message{
				ActivityID: "a1c3e5f7-9b2d-4f6a-8c0e-4b6d8f0a2c46", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "chat_upload_receive", Summary: "chat upload: diagram.png", Status: "ok", TargetID: wsA,
				Kind: molecule.KindUpload, Sender: molecule.SenderCanvasUser,
				Text: "chat upload: diagram.png",
				Attachments: []molecule.Attachment{{
					URI:  "platform-pending:" + wsA + "/f7e6d5c4-b3a2-4190-8f7e-6d5c4b3a2910",
					Name: "diagram.png", MimeType: "image/png", Size: 20480,
				}},
				CreatedAt: mustTime(t, "2026-11-21T17:27:03.664120Z"),
			},
		},
		{
			file: "type_text_parts.json", self: wsA,
			want: molecule.Message{
				ActivityID: "d2f4a6c8-0e1b-4d3f-a5c7-9e1b3d5f7a80", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", SourceID: wsB, TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderPeer,
				Text: "hello v0 world", MessageID: "legacy-msg-1", Role: "user",
				CreatedAt: mustTime(t, "2026-11-21T17:28:10.5Z"),
			},
		},
		{
			file: "shorthand_lost_text.json", self: wsA,
			want: molecule.Message{
				ActivityID: "f0e1d2c3-b4a5-4968-8776-5a4b3c2d1e0f", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "", Summary: " → ext-A (queued for poll)", Status: "ok", TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderCanvasUser,
				Text:      " → ext-A (queued for poll)",
				CreatedAt: mustTime(t, "2026-11-21T17:29:45.301977Z"),
			},
		},
		{
			file: "history_present.json", self: wsA,
			want: molecule.Message{
				ActivityID: "3b5d7f9a-1c2e-4f4a-b6c8-0d2e4f6a8b91", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderCanvasUser,
				Text: "and what about tomorrow?", MessageID: "b7d9f1a3-c5e7-4092-b4d6-f8a0c2e4a6b8", Role: "user",
				History:   []molecule.HistoryTurn{{Role: "user", Text: "what is on today?"}, {Role: "agent", Text: "Two meetings."}},
				CreatedAt: mustTime(t, "2026-11-21T17:30:02.000001Z"),
			},
		},
		{
			file: "peer_reply_peer_info.json", self: wsA,
			want: molecule.Message{
				ActivityID: "7a9c1e3f-5b7d-4f9a-8c1e-3f5a7c9e1b24", WorkspaceID: wsA, ActivityType: "a2a_receive",
				Method: "message/send", Summary: queuedA, Status: "ok", SourceID: wsB, TargetID: wsA,
				Kind: molecule.KindMessage, Sender: molecule.SenderPeer,
				Text: "Here is the report.",
				Attachments: []molecule.Attachment{
					{URI: "workspace:/uploads/q3.csv", Name: "q3.csv", MimeType: "text/csv", Size: 1024},
					{URI: "workspace:/uploads/notes.txt", Name: "notes.txt", MimeType: "text/plain", Size: 77},
				},
				MessageID: "relay-reply-0c5d7e21", Role: "agent",
				InReplyTo: "0c5d7e21-4b8a-4f3e-9a61-d2b7c8e5f901", Hops: 2,
				InReplyToMessageID: "ask-q3-1", ContextID: "ctx-q3", TaskID: "task-7",
				CreatedAt:    mustTime(t, "2026-11-21T17:31:17.442908Z"),
				PeerName:     "ext-B",
				PeerRole:     "researcher",
				AgentCardURL: "http://127.0.0.1:8080/registry/discover/" + wsB,
			},
		},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		seen[tc.file] = true
		t.Run(tc.file+"/"+tc.self[:4], func(t *testing.T) {
			raw := readFixture(t, tc.file)
			got, err := molecule.ParseRow(raw, tc.self)
			if err != nil {
				t.Fatalf("ParseRow: %v", err)
			}
			if !bytes.Equal(got.Raw, raw) {
				t.Errorf("Raw differs from the input")
			}
			gotCopy := *got
			gotCopy.Raw = nil
			if !reflect.DeepEqual(gotCopy, tc.want) {
				t.Errorf("ParseRow mismatch\n got: %+v\nwant: %+v", gotCopy, tc.want)
			}
			if r := got.Skip(false); r != tc.skip {
				t.Errorf("Skip(false) = %q, want %q", r, tc.skip)
			}
			wantAllow := tc.skip
			if wantAllow == molecule.SkipSelf {
				wantAllow = ""
			}
			if r := got.Skip(true); r != wantAllow {
				t.Errorf("Skip(true) = %q, want %q", r, wantAllow)
			}
		})
	}
	// Every fixture on disk is covered by the table.
	files, _ := filepath.Glob(filepath.Join("testdata", "rows", "*.json"))
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("fixture %s has no table entry", f)
		}
	}
}

// TestParseRowRoundTrip asserts Raw is the input byte for byte (not a
// re-encoding) and that mutating the caller's buffer afterwards does not
// change it.
func TestParseRowRoundTrip(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "rows", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v %d", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			orig := bytes.Clone(raw)
			m, err := molecule.ParseRow(raw, wsA)
			if err != nil {
				t.Fatal(err)
			}
			for i := range raw {
				raw[i] = 'x'
			}
			if !bytes.Equal(m.Raw, orig) {
				t.Fatalf("Raw = %q, want the input", m.Raw)
			}
			// Raw still parses to the same message.
			again, err := molecule.ParseRow(m.Raw, wsA)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, m) {
				t.Fatalf("re-parse differs")
			}
		})
	}
}

// row builds a minimal valid NEW row around a request_body (or none).
func row(extra string) string {
	base := `"id":"r-1","workspace_id":"` + wsA + `","activity_type":"a2a_receive","source_id":null,` +
		`"target_id":"` + wsA + `","method":"message/send","summary":"sum","status":"ok","created_at":"2026-11-21T17:25:36.745773Z"`
	if extra == "" {
		return "{" + base + "}"
	}
	return "{" + base + "," + extra + "}"
}

func TestParseRowTextAndAttachments(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		text  string
		atts  []molecule.Attachment
	}{
		{"no request_body falls back to summary", ``, "sum", nil},
		{"null request_body", `"request_body":null`, "sum", nil},
		{"params.parts fallback", `"request_body":{"params":{"parts":[{"kind":"text","text":"p2"}]}}`, "p2", nil},
		{"top-level parts fallback", `"request_body":{"parts":[{"type":"text","text":"p3"}]}`, "p3", nil},
		{"message parts win", `"request_body":{"params":{"message":{"parts":[{"kind":"text","text":"one"}]},"parts":[{"kind":"text","text":"two"}]},"parts":[{"kind":"text","text":"three"}]}`, "one", nil},
		{"empty text parts fall through", `"request_body":{"params":{"message":{"parts":[{"kind":"text","text":""}]}},"parts":[{"kind":"text","text":"recovered"}]}`, "recovered", nil},
		{"escaped kind", `"request_body":{"params":{"message":{"parts":[{"kind":"te\u0078t","text":"e"}]}}}`, "e", nil},
		{"parts joined with empty string", `"request_body":{"params":{"message":{"parts":[{"kind":"text","text":"a"},{"kind":"text","text":"b"},{"kind":"text"}]}}}`, "ab", nil},
		{"unrelated body falls back to summary", `"request_body":{"unrelated":"envelope"}`, "sum", nil},
		{"history is ignored", `"request_body":{"params":{"metadata":{"history":[{"parts":[{"kind":"text","text":"old"}]}]}}}`, "sum", nil},
		{
			"attachment-only message keeps empty text",
			`"request_body":{"params":{"message":{"parts":[{"kind":"file","file":{"uri":"workspace:/a","name":"a"}}]}}}`,
			"", []molecule.Attachment{{URI: "workspace:/a", Name: "a"}},
		},
		{
			"flat type:file part with mime_type",
			`"request_body":{"params":{"message":{"parts":[{"kind":"text","text":"t"},{"type":"file","uri":"u","name":"n","mime_type":"x/y","size":3}]}}}`,
			"t", []molecule.Attachment{{URI: "u", Name: "n", MimeType: "x/y", Size: 3}},
		},
		{
			"file part without uri and name is dropped; bad size ignored",
			`"request_body":{"params":{"message":{"parts":[{"kind":"text","text":"t"},{"kind":"file","file":{}},{"kind":"file","file":{"name":"only","size":-4}},{"kind":"file","file":{"uri":"u2","size":1.5}}]}}}`,
			"t", []molecule.Attachment{{Name: "only"}, {URI: "u2"}},
		},
		{
			"enrichment attachment not in parts is added, duplicates are not",
			`"request_body":{"params":{"message":{"parts":[{"kind":"text","text":"t"},{"kind":"file","file":{"uri":"u","name":"n"}}]}}},"attachments":[{"kind":"file","uri":"u","name":"n"},{"kind":"file","uri":"v","name":"w","mime_type":"m"},42,{"kind":"file","uri":7}]`,
			"t", []molecule.Attachment{{URI: "u", Name: "n"}, {URI: "v", Name: "w", MimeType: "m"}},
		},
		{"non-text non-file parts are ignored", `"request_body":{"params":{"message":{"parts":[{"kind":"data","data":{"x":1}},{"kind":"text","text":"ok"}]}}}`, "ok", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := molecule.ParseRow(json.RawMessage(row(tc.extra)), wsA)
			if err != nil {
				t.Fatalf("ParseRow: %v", err)
			}
			if m.Text != tc.text {
				t.Errorf("Text = %q, want %q", m.Text, tc.text)
			}
			if !reflect.DeepEqual(m.Attachments, tc.atts) {
				t.Errorf("Attachments = %+v, want %+v", m.Attachments, tc.atts)
			}
		})
	}
}

func TestParseRowHops(t *testing.T) {
	tests := []struct {
		hops string
		want int
	}{
		{`0`, 0}, {`3`, 3}, {`2.0`, 2}, {`1e2`, 100}, {`-1`, 0}, {`1.5`, 0}, {`"3"`, 0}, {`null`, 0},
		{`true`, 0}, {`99999999999999999999`, 0}, {`2147483647`, 2147483647}, {`2147483648`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.hops, func(t *testing.T) {
			extra := `"request_body":{"params":{"message":{"messageId":"m","parts":[],"metadata":{"relay_hops":` + tc.hops + `}}}}`
			m, err := molecule.ParseRow(json.RawMessage(row(extra)), wsA)
			if err != nil {
				t.Fatal(err)
			}
			if m.Hops != tc.want {
				t.Fatalf("Hops = %d, want %d", m.Hops, tc.want)
			}
		})
	}
}

func TestParseRowSender(t *testing.T) {
	tests := []struct {
		name   string
		source string
		msgID  string
		method string
		self   string
		want   molecule.Sender
	}{
		{"null is canvas", `null`, "m", "message/send", wsA, molecule.SenderCanvasUser},
		{"absent is canvas", ``, "m", "message/send", wsA, molecule.SenderCanvasUser},
		{"empty string is canvas", `""`, "m", "message/send", wsA, molecule.SenderCanvasUser},
		{"cron prefix with null source", `null`, "cron-12345678-abcdefgh", "message/send", wsA, molecule.SenderCron},
		{"cron prefix from a peer is a peer", `"` + wsB + `"`, "cron-12345678-abcdefgh", "message/send", wsA, molecule.SenderPeer},
		{"self", `"` + wsA + `"`, "m", "message/send", wsA, molecule.SenderSelf},
		{"no self configured", `"` + wsA + `"`, "m", "message/send", "", molecule.SenderPeer},
		{"method never decides: user_message from peer", `"` + wsB + `"`, "m", "user_message", wsA, molecule.SenderPeer},
		{"method never decides: notify with a source", `"` + wsB + `"`, "m", "notify", wsA, molecule.SenderPeer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := ""
			if tc.source != "" {
				src = `"source_id":` + tc.source + `,`
			}
			raw := `{"id":"r","created_at":"2026-11-21T17:25:36Z",` + src + `"method":"` + tc.method +
				`","request_body":{"params":{"message":{"messageId":"` + tc.msgID + `","parts":[{"kind":"text","text":"x"}]}}}}`
			m, err := molecule.ParseRow(json.RawMessage(raw), tc.self)
			if err != nil {
				t.Fatal(err)
			}
			if m.Sender != tc.want {
				t.Fatalf("Sender = %d, want %d", m.Sender, tc.want)
			}
		})
	}
}

func TestParseRowKind(t *testing.T) {
	for method, want := range map[string]molecule.RowKind{
		"notify": molecule.KindOwnNotify, "chat_upload_receive": molecule.KindUpload,
		"message/send": molecule.KindMessage, "tasks/get": molecule.KindMessage, "": molecule.KindMessage,
		"Notify": molecule.KindMessage,
	} {
		raw := `{"id":"r","created_at":"2026-11-21T17:25:36Z","method":"` + method + `"}`
		m, err := molecule.ParseRow(json.RawMessage(raw), wsA)
		if err != nil {
			t.Fatalf("%q: %v", method, err)
		}
		if m.Kind != want {
			t.Errorf("method %q: Kind = %d, want %d", method, m.Kind, want)
		}
	}
}

func TestParseRowNotifyWithoutResult(t *testing.T) {
	raw := `{"id":"n","created_at":"2026-11-21T17:25:36Z","method":"notify","summary":"Agent message: x","response_body":{"result":{"odd":true}}}`
	m, err := molecule.ParseRow(json.RawMessage(raw), wsA)
	if err != nil {
		t.Fatal(err)
	}
	if m.Text != "Agent message: x" || m.Skip(true) != molecule.SkipOwnNotify {
		t.Fatalf("got Text %q Skip %q", m.Text, m.Skip(true))
	}
}

func TestParseRowErrors(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		id     string // RowError.ID
		substr string // in the message
	}{
		{"not JSON", `not json`, "", "not valid JSON"},
		{"empty input", ``, "", "not valid JSON"},
		{"array", `[{"id":"x"}]`, "", "want a JSON object, got an array"},
		{"string", `"row"`, "", "got a string"},
		{"null", `null`, "", "got null"},
		{"truncated object", `{"id":"x"`, "", "not valid JSON"},
		{"missing id", `{"created_at":"2026-11-21T17:25:36Z"}`, "", "id is missing"},
		{"empty id", `{"id":"","created_at":"2026-11-21T17:25:36Z"}`, "", "id is missing"},
		{"numeric id", `{"id":7,"created_at":"2026-11-21T17:25:36Z"}`, "", "id: want a string, got a number"},
		{"bad created_at", `{"id":"6af0b425","created_at":"x"}`, "6af0b425", `molecule: malformed activity row 6af0b425: created_at "x": parsing time`},
		{"missing created_at", `{"id":"6af0b425"}`, "6af0b425", "created_at is missing"},
		{"numeric created_at", `{"id":"6af0b425","created_at":1}`, "6af0b425", "created_at: want a string"},
		{"source_id number", row(`"source_id":5`), "r-1", "source_id: want a string, got a number"},
		{"source_id object", `{"id":"r","created_at":"2026-11-21T17:25:36Z","source_id":{}}`, "r", "source_id: want a string, got an object"},
		{"method bool", `{"id":"r","created_at":"2026-11-21T17:25:36Z","method":true}`, "r", "method: want a string, got a boolean"},
		{"request_body string", row(`"request_body":"hello"`), "r-1", "request_body: want an object"},
		{"params array", row(`"request_body":{"params":[]}`), "r-1", "request_body.params: want an object"},
		{"message string", row(`"request_body":{"params":{"message":"hi"}}`), "r-1", "request_body.params.message: want an object"},
		{"parts string", row(`"request_body":{"params":{"message":{"parts":"hi"}}}`), "r-1", "request_body.params.message.parts: want an array"},
		{"params.parts object", row(`"request_body":{"params":{"parts":{}}}`), "r-1", "request_body.params.parts: want an array"},
		{"top parts number", row(`"request_body":{"parts":1}`), "r-1", "request_body.parts: want an array"},
		{"part not object", row(`"request_body":{"params":{"message":{"parts":[{"kind":"text","text":"a"},"b"]}}}`), "r-1", "request_body.params.message.parts[1]: want an object, got a string"},
		{"text not string", row(`"request_body":{"params":{"message":{"parts":[{"kind":"text","text":5}]}}}`), "r-1", "parts[0].text: want a string"},
		{"type not string beside kind text", row(`"request_body":{"params":{"message":{"parts":[{"kind":"text","type":2,"text":"a"}]}}}`), "r-1", "request_body.params.message.parts[0].type: want a string, got a number"},
		{"kind not string", row(`"request_body":{"params":{"message":{"parts":[{"kind":1}]}}}`), "r-1", "parts[0].kind: want a string"},
		{"file not object", row(`"request_body":{"params":{"message":{"parts":[{"kind":"file","file":"u"}]}}}`), "r-1", "parts[0].file: want an object"},
		{"file uri not string", row(`"request_body":{"params":{"message":{"parts":[{"kind":"file","file":{"uri":1}}]}}}`), "r-1", "parts[0].file.uri: want a string"},
		{"messageId not string", row(`"request_body":{"params":{"message":{"messageId":1}}}`), "r-1", "messageId: want a string"},
		{"metadata not object", row(`"request_body":{"params":{"message":{"metadata":[]}}}`), "r-1", "metadata: want an object"},
		{"in_reply_to not string", row(`"request_body":{"params":{"message":{"metadata":{"in_reply_to":5}}}}`), "r-1", "in_reply_to: want a string"},
		{"in_reply_to_message_id not string", row(`"request_body":{"params":{"message":{"metadata":{"in_reply_to_message_id":5}}}}`), "r-1", "in_reply_to_message_id: want a string"},
		{"contextId not string", row(`"request_body":{"params":{"message":{"contextId":{}}}}`), "r-1", "contextId: want a string"},
		{"notify response_body array", `{"id":"n","created_at":"2026-11-21T17:25:36Z","method":"notify","response_body":[]}`, "n", "response_body: want an object"},
		{"notify parts not array", `{"id":"n","created_at":"2026-11-21T17:25:36Z","method":"notify","response_body":{"result":"x","parts":"p"}}`, "n", "response_body.parts: want an array"},
		{"upload uri number", `{"id":"u","created_at":"2026-11-21T17:25:36Z","method":"chat_upload_receive","request_body":{"uri":3}}`, "u", "request_body.uri: want a string"},
		{"hostile id is quoted", `{"id":"a\nb","created_at":"x"}`, "a\nb", `row "a\nb": created_at`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := molecule.ParseRow(json.RawMessage(tc.raw), wsA)
			if err == nil {
				t.Fatalf("no error; got %+v", m)
			}
			if m != nil {
				t.Errorf("message %+v returned with an error", m)
			}
			if !errors.Is(err, molecule.ErrMalformedRow) {
				t.Errorf("error %v does not match ErrMalformedRow", err)
			}
			var re *molecule.RowError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RowError", err)
			}
			if re.ID != tc.id {
				t.Errorf("RowError.ID = %q, want %q", re.ID, tc.id)
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("error %q does not contain %q", err, tc.substr)
			}
			if !strings.HasPrefix(err.Error(), "molecule: malformed activity row") {
				t.Errorf("error %q lacks the prefix", err)
			}
		})
	}
}

func TestParseRowErrorUnwrapsTimeError(t *testing.T) {
	_, err := molecule.ParseRow(json.RawMessage(`{"id":"x","created_at":"2026-13-01T00:00:00Z"}`), "")
	var pe *time.ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v does not wrap *time.ParseError", err)
	}
}

func TestParseRowLenient(t *testing.T) {
	// Unknown keys, absent columns other than id/created_at, tool_trace,
	// and wrongly typed enrichment are all fine.
	raw := `{"id":"r","created_at":"2026-11-21T17:25:36.1+02:00","tool_trace":[1,2],"future":{"x":1},` +
		`"peer_name":5,"peer_role":null,"agent_card_url":["x"],"attachments":"nope"}`
	m, err := molecule.ParseRow(json.RawMessage(raw), wsA)
	if err != nil {
		t.Fatal(err)
	}
	if m.PeerName != "" || m.PeerRole != "" || m.AgentCardURL != "" || m.Attachments != nil {
		t.Fatalf("bad enrichment not ignored: %+v", m)
	}
	if want := time.Date(2026, 11, 21, 15, 25, 36, 100_000_000, time.UTC); !m.CreatedAt.Equal(want) {
		t.Fatalf("CreatedAt = %v, want %v", m.CreatedAt, want)
	}
	if m.Text != "" || m.Sender != molecule.SenderCanvasUser || m.Kind != molecule.KindMessage {
		t.Fatalf("unexpected %+v", m)
	}
}

func TestParseRowLongIDIsCut(t *testing.T) {
	id := strings.Repeat("é", 100)
	_, err := molecule.ParseRow(json.RawMessage(`{"id":"`+id+`","created_at":"bad"}`), "")
	if err == nil {
		t.Fatal("no error")
	}
	if len(err.Error()) > 256 {
		t.Fatalf("error not bounded: %d bytes", len(err.Error()))
	}
	var re *molecule.RowError
	if !errors.As(err, &re) || re.ID != id {
		t.Fatalf("RowError.ID not kept in full")
	}
}

// TestParseRowDoubleFeed parses every row the double's feed serves for a
// canvas message, a peer message, a self-message and the agent's own
// notify, and checks the classification a poller relies on.
func TestParseRowDoubleFeed(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	a := srv.CreateWorkspace("ext-A")
	b := srv.CreateWorkspace("ext-B")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca := doubleClient(t, srv, a)
	// The created rows default to push (docs/protocol.md §3): register poll.
	for _, c := range []*molecule.Client{ca, doubleClient(t, srv, b)} {
		if _, err := c.Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPoll}); err != nil {
			t.Fatal(err)
		}
	}

	if code, body, err := srv.SendCanvas(ctx, a.ID, "hello from canvas"); err != nil || code != http.StatusOK {
		t.Fatalf("canvas send: %d %s %v", code, body, err)
	}
	if code, body, err := srv.SendPeer(ctx, b, a.ID, "hello from B"); err != nil || code != http.StatusOK {
		t.Fatalf("peer send: %d %s %v", code, body, err)
	}
	if code, body, err := srv.SendPeer(ctx, a, a.ID, "note to self"); err != nil || code != http.StatusOK {
		t.Fatalf("self send: %d %s %v", code, body, err)
	}
	if _, err := ca.Notify(ctx, "reply to canvas", nil); err != nil {
		t.Fatal(err)
	}

	// The double writes queued rows before it answers (no WithAsyncRows).
	page, err := ca.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(page.Rows))
	}
	byText := map[string]*molecule.Message{}
	for _, r := range page.Rows {
		m, err := molecule.ParseRow(r.JSON, a.ID)
		if err != nil {
			t.Fatalf("ParseRow(%s): %v", r.JSON, err)
		}
		if m.ActivityID != r.ID || !m.CreatedAt.Equal(r.CreatedAt) {
			t.Errorf("row %s: id/created_at disagree with the client's: %s %v", r.ID, m.ActivityID, m.CreatedAt)
		}
		byText[m.Text] = m
	}
	for text, want := range map[string]struct {
		sender molecule.Sender
		source string
		skip   string
	}{
		"hello from canvas": {molecule.SenderCanvasUser, "", ""},
		"hello from B":      {molecule.SenderPeer, b.ID, ""},
		"note to self":      {molecule.SenderSelf, a.ID, molecule.SkipSelf},
		"reply to canvas":   {molecule.SenderCanvasUser, "", molecule.SkipOwnNotify},
	} {
		m := byText[text]
		if m == nil {
			t.Errorf("no row with text %q (have %v)", text, keys(byText))
			continue
		}
		if m.Sender != want.sender || m.SourceID != want.source || m.Skip(false) != want.skip {
			t.Errorf("%q: sender %d source %q skip %q, want %d %q %q", text, m.Sender, m.SourceID, m.Skip(false), want.sender, want.source, want.skip)
		}
	}
}

func keys(m map[string]*molecule.Message) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// doubleClient is a client of ws on the platform double, without retries.
func doubleClient(t *testing.T, srv *moleculetest.Server, ws moleculetest.Workspace) *molecule.Client {
	t.Helper()
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
