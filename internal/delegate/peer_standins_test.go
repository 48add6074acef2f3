package delegate_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The peers that are not Molecule Relays, as they answer a message they
// received from us: each stand-in sends exactly the body and headers of
// its client's reply (docs/delegation.md, "Who answers how").

// question is an a2a_receive row on a stand-in's feed, as its client
// reads it: the row's id, its sender and the message's fields.
type question struct {
	activity, source, text, messageID, contextID, taskID string
}

// answerFunc builds the stand-in's reply to q: the headers and body its
// client POSTs to /workspaces/<q.source>/a2a, or nil not to answer.
type answerFunc func(peer moleculetest.Workspace, q question) (http.Header, []byte)

// tsChannelAnswer is reply_to_workspace of the TypeScript channel
// (EnterOS-AI/enteros-mcp-claude-channel 4255a28 server.ts:844-870): a
// JSON-RPC message/send with role "user", a fresh messageId and one text
// part with its kind, no contextId, taskId or metadata; headers
// Authorization (the workspace bearer), Content-Type,
// X-Source-Workspace-Id and Origin, no X-Workspace-ID (the platform
// takes the caller from the bearer).
func tsChannelAnswer(text func(string) string) answerFunc {
	return func(peer moleculetest.Workspace, q question) (http.Header, []byte) {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+peer.Token)
		h.Set("Content-Type", "application/json")
		h.Set("X-Source-Workspace-Id", peer.ID)
		h.Set("Origin", "http://platform.example")
		return h, rpc(map[string]any{"role": "user", "messageId": newID(), "parts": textPart(text(q.text))})
	}
}

// pythonSDKAnswer is RemoteAgentClient.reply of the Python SDK
// (EnterOS-AI/enteros-sdk-python 055bb3f, molecule_external_workspace/
// client.py, reply, peer_agent branch): role "agent", a fresh uuid4
// messageId, one kind "text" part, no other field; headers the bearer,
// X-Source-Workspace-Id and X-Workspace-ID (both its own id) and
// Content-Type.
func pythonSDKAnswer(text func(string) string) answerFunc {
	return func(peer moleculetest.Workspace, q question) (http.Header, []byte) {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+peer.Token)
		h.Set("X-Source-Workspace-Id", peer.ID)
		h.Set("X-Workspace-ID", peer.ID)
		h.Set("Content-Type", "application/json")
		return h, rpc(map[string]any{"role": "agent", "messageId": newID(), "parts": textPart(text(q.text))})
	}
}

// plainA2AAnswer is an A2A v0.3 agent behind poll mode that answers with
// a message/send of its own in the conversation it was asked in: role
// "agent", its own messageId, the question's contextId echoed (A2A keeps
// a conversation's contextId on every turn), no metadata of ours; its
// bearer and X-Workspace-ID.
func plainA2AAnswer(text func(string) string) answerFunc {
	return func(peer moleculetest.Workspace, q question) (http.Header, []byte) {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+peer.Token)
		h.Set("X-Workspace-ID", peer.ID)
		return h, rpc(map[string]any{"role": "agent", "messageId": newID(), "contextId": q.contextID, "parts": textPart(text(q.text))})
	}
}

func rpc(message map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": newID(), "method": "message/send",
		"params": map[string]any{"message": message}})
	return b
}

func textPart(s string) []any { return []any{map[string]any{"kind": "text", "text": s}} }

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// standIn runs peer's client: it reads peer's feed every 20 ms (the
// clients poll every 5 s; the delay is theirs, not ours) and answers
// each new message with answer, through the platform. It stops at test
// cleanup; questions returns what it was asked so far.
type standIn struct {
	mu    sync.Mutex
	seen  map[string]bool
	asked []question
}

func startStandIn(t testing.TB, w *pipelinetest.World, peer moleculetest.Workspace, answer answerFunc) *standIn {
	s := &standIn{seen: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, q := range s.fresh(w.Plat.Rows(peer.ID)) {
				if h, body := answer(peer, q); body != nil {
					if st, resp, err := w.Plat.SendRaw(ctx, q.source, h, body); err != nil || st != http.StatusOK {
						if ctx.Err() == nil {
							t.Errorf("stand-in %s: answer refused: %d %s %v", peer.Name, st, resp, err)
						}
					}
				}
			}
		}
	}()
	return s
}

// fresh returns the message/send rows of rows not seen before.
func (s *standIn) fresh(rows []moleculetest.Row) []question {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []question
	for _, r := range rows {
		var row struct {
			ID          string `json:"id"`
			Type        string `json:"activity_type"`
			SourceID    string `json:"source_id"`
			Method      string `json:"method"`
			RequestBody struct {
				Params struct {
					Message struct {
						MessageID string `json:"messageId"`
						ContextID string `json:"contextId"`
						TaskID    string `json:"taskId"`
						Parts     []struct {
							Text string `json:"text"`
						} `json:"parts"`
					} `json:"message"`
				} `json:"params"`
			} `json:"request_body"`
		}
		if json.Unmarshal(r, &row) != nil || s.seen[row.ID] || row.Method != "message/send" || row.SourceID == "" {
			continue
		}
		s.seen[row.ID] = true
		m := row.RequestBody.Params.Message
		q := question{activity: row.ID, source: row.SourceID, messageID: m.MessageID, contextID: m.ContextID, taskID: m.TaskID}
		if len(m.Parts) > 0 {
			q.text = m.Parts[0].Text
		}
		s.asked = append(s.asked, q)
		out = append(out, q)
	}
	return out
}

func (s *standIn) questions() []question {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]question(nil), s.asked...)
}
