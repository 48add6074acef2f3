package dispatcher_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// attachmentAgent records the attachments it receives and answers each
// message with text and one attachment.
type attachmentAgent struct {
	mu   sync.Mutex
	seen map[string][]events.Attachment // by message text
}

func (a *attachmentAgent) Handle(ctx context.Context, req *handler.Request) (string, error) {
	ans, err := a.Answer(ctx, req)
	return ans.Text, err
}

func (a *attachmentAgent) Answer(_ context.Context, req *handler.Request) (handler.Answer, error) {
	a.mu.Lock()
	a.seen[req.Message.Text] = req.Message.Attachments
	a.mu.Unlock()
	return handler.Answer{Text: "report attached", Attachments: []events.Attachment{
		{URI: "https://files.example/report.pdf", Name: "report.pdf", MimeType: "application/pdf", Size: 2048}}}, nil
}

func (a *attachmentAgent) saw(text string) ([]events.Attachment, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.seen[text]
	return v, ok
}

// withFile is a message/send body with a text part and a file part.
func withFile(text, role string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "req-" + text, "method": "message/send",
		"params": map[string]any{"message": map[string]any{"role": role, "messageId": "m-" + text, "parts": []any{
			map[string]any{"kind": "text", "text": text},
			map[string]any{"kind": "file", "file": map[string]any{"uri": "https://files.example/in.png", "name": "in.png", "mimeType": "image/png", "size": 512}},
		}}}})
	return b
}

// TestAttachmentsBothWays: an inbound file part reaches the handler, and
// the handler's answer attachments reach the canvas as notify
// attachments and a peer as A2A file parts (docs/protocol.md §5, §6).
func TestAttachmentsBothWays(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	agent := &attachmentAgent{seen: map[string][]events.Attachment{}}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: agent})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)

	ctx := pipelinetest.Ctx(t)
	if st, body, err := w.Plat.SendRaw(ctx, w.Agent.ID, w.Plat.CanvasHeader(), withFile("from-canvas", "user")); err != nil || st != http.StatusOK {
		t.Fatalf("canvas send: %d %s %v", st, body, err)
	}
	peer := w.Peers[0]
	h := http.Header{"X-Workspace-Id": {peer.ID}, "Authorization": {"Bearer " + peer.Token}}
	if st, body, err := w.Plat.SendRaw(ctx, w.Agent.ID, h, withFile("from-peer", "user")); err != nil || st != http.StatusOK {
		t.Fatalf("peer send: %d %s %v", st, body, err)
	}

	wantIn := []events.Attachment{{URI: "https://files.example/in.png", Name: "in.png", MimeType: "image/png", Size: 512}}
	pipelinetest.Eventually(t, 20*time.Second, "both replies posted", func() bool {
		return len(w.Plat.Notifications(w.Agent.ID)) == 1 && len(w.Plat.A2ACalls(peer.ID)) == 1
	})
	for _, text := range []string{"from-canvas", "from-peer"} {
		if got, _ := agent.saw(text); !reflect.DeepEqual(got, wantIn) {
			t.Errorf("handler saw attachments %+v for %s, want %+v", got, text, wantIn)
		}
	}

	wantOut := `[{"uri":"https://files.example/report.pdf","name":"report.pdf","mimeType":"application/pdf","size":2048}]`
	n := w.Plat.Notifications(w.Agent.ID)[0]
	if n.Message != "report attached" || !jsonEqual(t, n.Attachments, wantOut) {
		t.Errorf("notify = %q attachments %s, want %s", n.Message, n.Attachments, wantOut)
	}
	var call struct {
		Params struct {
			Message struct {
				Parts []json.RawMessage `json:"parts"`
			} `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal(w.Plat.A2ACalls(peer.ID)[0].Body, &call); err != nil {
		t.Fatal(err)
	}
	parts := call.Params.Message.Parts
	if len(parts) != 2 || !jsonEqual(t, parts[0], `{"kind":"text","text":"report attached"}`) ||
		!jsonEqual(t, parts[1], `{"kind":"file","file":{"uri":"https://files.example/report.pdf","name":"report.pdf","mimeType":"application/pdf","size":2048}}`) {
		t.Errorf("a2a parts = %s", parts)
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(a, b)
}

// TestStructuredAnswerNoReplyAndMalformed runs the real exec: handler with
// MOLECULE_HANDLER_ANSWER=json: "reply": false is handled with no reply,
// and output that is not a structured answer is dead-lettered as a
// permanent error saying so; neither posts anything.
func TestStructuredAnswerNoReplyAndMalformed(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	prog := filepath.Join(t.TempDir(), "agent.sh")
	script := `#!/bin/sh
case "$(cat)" in
*'"text":"silent"'*) echo '{"text":"not for the user","reply":false}' ;;
*) echo 'plain words, not JSON' ;;
esac
`
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := handler.Parse("exec:"+prog, handler.Options{AnswerJSON: true})
	if err != nil {
		t.Fatal(err)
	}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	for _, text := range []string{"silent", "garbled"} {
		if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, text); err != nil {
			t.Fatal(err)
		}
	}
	pipelinetest.Eventually(t, 20*time.Second, "one no-reply and one dead letter", func() bool {
		st := pl.Dispatcher.Stats()
		return st.NoReply == 1 && st.DeadLettered == 1
	})
	dl := w.DeadLetters()
	if len(dl) != 1 || dl[0].DeadLetter.Reason != events.ReasonPermanent || !strings.Contains(dl[0].DeadLetter.Error, "structured answer") {
		t.Fatalf("dead letters %+v, want one permanent error about the structured answer", dl)
	}
	if st := pl.Dispatcher.Stats(); st.Replied != 0 {
		t.Fatalf("dispatcher published %d replies, want none", st.Replied)
	}
	if n := w.Plat.Notifications(w.Agent.ID); len(n) != 0 {
		t.Fatalf("posted %+v, want nothing", n)
	}
}
