package molecule

import (
	"encoding/json"
	"fmt"
)

// A2AAnswer is the answer a push-mode peer gave in its JSON-RPC response
// to a message/send (docs/protocol.md §6: it arrives only in the HTTP
// response body, never on the asking workspace's feed).
type A2AAnswer struct {
	Text        string
	Attachments []Attachment
}

// ParseA2AAnswer reads a peer's JSON-RPC response body. It returns nil and
// no error when the body holds no answer yet: a queued acknowledgement
// (200 {"status":"queued"}, 202 {"queued":true}) or a task still
// submitted or working with no message (a relay's push ingress answers
// so, and replies later through the platform). A JSON-RPC error, or a
// result it cannot read, is an error.
func ParseA2AAnswer(body json.RawMessage) (*A2AAnswer, error) {
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("%w: a2a answer: %v", ErrInvalidArgument, err)
	}
	switch {
	case resp.Error != nil:
		return nil, fmt.Errorf("%w: peer answered JSON-RPC error %d: %s", ErrPeerCall, resp.Error.Code, resp.Error.Message)
	case resp.JSONRPC == "" || len(resp.Result) == 0:
		return nil, nil // an acknowledgement, not an answer
	}
	var res struct {
		Kind   string            `json:"kind"`
		Parts  []json.RawMessage `json:"parts"`
		Status struct {
			State   string `json:"state"`
			Message *struct {
				Parts []json.RawMessage `json:"parts"`
			} `json:"message"`
		} `json:"status"`
		Artifacts []struct {
			Parts []json.RawMessage `json:"parts"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return nil, fmt.Errorf("%w: a2a answer result: %v", ErrInvalidArgument, err)
	}
	parts := res.Parts
	if res.Kind == "task" {
		// A task's answer is its artifacts, else its status message.
		parts = nil
		for _, a := range res.Artifacts {
			parts = append(parts, a.Parts...)
		}
		if len(parts) == 0 && res.Status.Message != nil {
			parts = res.Status.Message.Parts
		}
	}
	text, files, err := scanParts(parts, "result.parts")
	if err != nil {
		return nil, fmt.Errorf("%w: a2a answer: %v", ErrInvalidArgument, err)
	}
	if text == "" && len(files) == 0 {
		return nil, nil
	}
	return &A2AAnswer{Text: text, Attachments: files}, nil
}
