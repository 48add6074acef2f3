package molecule_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// A push peer's synchronous answer is read from its JSON-RPC response; an
// acknowledgement or a task still running is "no answer yet", a JSON-RPC
// error or an unreadable result an error.
func TestParseA2AAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, body, text string
		files            int
		err              error
	}{
		{"message", `{"jsonrpc":"2.0","id":"1","result":{"kind":"message","role":"agent","parts":[{"kind":"text","text":"4"},{"type":"text","text":"2"},{"kind":"file","file":{"uri":"https://x/a.png","name":"a.png","mimeType":"image/png"}}]}}`, "42", 1, nil},
		{"task with artifact", `{"jsonrpc":"2.0","id":"1","result":{"kind":"task","status":{"state":"completed"},"artifacts":[{"parts":[{"kind":"text","text":"done"}]}]}}`, "done", 0, nil},
		{"task status message", `{"jsonrpc":"2.0","id":"1","result":{"kind":"task","status":{"state":"completed","message":{"parts":[{"kind":"text","text":"ok"}]}}}}`, "ok", 0, nil},
		{"relay push ingress: submitted", `{"jsonrpc":"2.0","id":"1","result":{"kind":"task","id":"a","status":{"state":"submitted"}}}`, "", 0, nil},
		{"poll peer queued", `{"delivery_mode":"poll","method":"message/send","status":"queued"}`, "", 0, nil},
		{"push peer busy", `{"queued":true,"queue_id":"q","queue_depth":1}`, "", 0, nil},
		{"json-rpc error", `{"jsonrpc":"2.0","id":"1","error":{"code":-32603,"message":"boom"}}`, "", 0, molecule.ErrPeerCall},
		{"bad part", `{"jsonrpc":"2.0","id":"1","result":{"kind":"message","parts":["x"]}}`, "", 0, molecule.ErrInvalidArgument},
		{"not json", `<html>`, "", 0, molecule.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := molecule.ParseA2AAnswer(json.RawMessage(tc.body))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.text == "" {
				if a != nil {
					t.Fatalf("answer %+v, want none yet", a)
				}
				return
			}
			if a == nil || a.Text != tc.text || len(a.Attachments) != tc.files {
				t.Fatalf("answer %+v, want text %q and %d files", a, tc.text, tc.files)
			}
		})
	}
}
