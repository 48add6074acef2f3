package delegate_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// pushAgent is a push-mode agent on loopback: the platform POSTs it the
// JSON-RPC message/send and hands its JSON-RPC answer (text and a file
// part) back to the caller in the HTTP response (docs/protocol.md §6).
// It returns the URL to register.
func pushAgent(t *testing.T, calls chan<- string) string {
	return pushAgentAnswering(t, calls, func(text string) map[string]any {
		return map[string]any{
			"kind": "message", "role": "agent", "messageId": "push-answer",
			"parts": []any{
				map[string]any{"kind": "text", "text": "push: " + text},
				map[string]any{"kind": "file", "file": map[string]any{"uri": "https://files.example/r.csv", "name": "r.csv", "mimeType": "text/csv"}},
			},
		}
	})
}

// pushAgentAnswering is a push-mode agent whose JSON-RPC result for a
// question's text is result(text).
func pushAgentAnswering(t testing.TB, calls chan<- string, result func(text string) map[string]any) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Message struct {
					Role      string `json:"role"`
					MessageID string `json:"messageId"`
					Parts     []struct {
						Text string `json:"text"`
					} `json:"parts"`
				} `json:"message"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Params.Message.Parts) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		calls <- req.Params.Message.Role + " " + req.Params.Message.MessageID
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result(req.Params.Message.Parts[0].Text)})
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	// The double refuses loopback IP literals, not the name.
	return "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/"
}

// A push-mode peer answers in the HTTP response of the question's POST:
// the answer (text and attachment) is taken from it, stored in the ask
// record, and the canvas gets it; nothing waits for the feed.
func TestE2EDelegationToPushPeer(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	peer := w.Plat.CreateWorkspace("push-peer")
	calls := make(chan string, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Client(peer).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: pushAgent(t, calls)}); err != nil {
		t.Fatal(err)
	}

	procA := w.Proc()
	rec := pipelinetest.NewRecorder(askingHandler(newAsker(t, w, procA), peer.ID, 10*time.Second))
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
	defer pl.Stop(t)
	pipelinetest.Start(t, w.NewDispatcher(procA, rec, dispatcher.Config{}).Run)
	w.WaitSeeded(w.Agent.ID)

	w.SendCanvas(askPrefix + "the report")
	pipelinetest.Eventually(t, 20*time.Second, "the canvas answer", func() bool { return len(notifies(w)) >= 1 })
	if got := notifies(w); len(got) != 1 || got[0] != "peer says: push: the report" {
		t.Fatalf("canvas answers %q, want one quoting the push peer", got)
	}
	asked := w.SentText(askPrefix + "the report")
	ar := askRecord(t, w, asked.ActivityID, 1)
	if ar.State != events.AskAnswered || ar.Answer == nil || len(ar.Answer.Attachments) != 1 || ar.Answer.Attachments[0].Name != "r.csv" {
		t.Errorf("ask record %+v, want the push answer with its file", ar)
	}
	if ar.Answer != nil && ar.Answer.ActivityID != "" {
		t.Errorf("push answer has activity %q; it never was on the feed", ar.Answer.ActivityID)
	}
	if got, want := <-calls, "user "+ar.MessageID; got != want {
		t.Errorf("push agent got %q, want %q", got, want)
	}
	if len(calls) != 0 {
		t.Errorf("push agent asked %d more times", len(calls))
	}
}

// A plain A2A agent in push mode answers in the HTTP response with any of
// the three results A2A v0.3 allows: a message, a completed task with
// artifacts, or a task whose status carries the answer as a message. Each
// completes the ask with its text.
func TestE2EDelegationToPushPeerAnswerShapes(t *testing.T) {
	t.Parallel()
	text := func(s string) []any { return []any{map[string]any{"kind": "text", "text": s}} }
	for name, result := range map[string]func(string) map[string]any{
		"message": func(q string) map[string]any {
			return map[string]any{"kind": "message", "role": "agent", "messageId": "m", "parts": text("push: " + q)}
		},
		"task with artifacts": func(q string) map[string]any {
			return map[string]any{"kind": "task", "id": "t", "contextId": "c", "status": map[string]any{"state": "completed"},
				"artifacts": []any{map[string]any{"artifactId": "a", "parts": text("push: " + q)}}}
		},
		"task with status message": func(q string) map[string]any {
			return map[string]any{"kind": "task", "id": "t", "contextId": "c", "status": map[string]any{"state": "completed",
				"message": map[string]any{"kind": "message", "role": "agent", "messageId": "m", "parts": text("push: " + q)}}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := pipelinetest.New(t, pipelinetest.Options{})
			peer := w.Plat.CreateWorkspace("push-peer")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			url := pushAgentAnswering(t, make(chan string, 4), result)
			if _, err := w.Client(peer).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: url}); err != nil {
				t.Fatal(err)
			}
			procA := w.Proc()
			pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true})
			defer pl.Stop(t)
			pipelinetest.Start(t, w.NewDispatcher(procA, askingHandler(newAsker(t, w, procA), peer.ID, 10*time.Second), dispatcher.Config{}).Run)
			w.WaitSeeded(w.Agent.ID)
			w.SendCanvas(askPrefix + "the report")
			pipelinetest.Eventually(t, 20*time.Second, "the canvas answer", func() bool { return len(notifies(w)) >= 1 })
			if got := notifies(w); len(got) != 1 || got[0] != "peer says: push: the report" {
				t.Fatalf("canvas answers %q, want one quoting the push peer", got)
			}
			// Answered in the response, the question leaves the awaiting
			// list: questions do not pile up there.
			if e, err := procA.Topo.Asks.Get(ctx, events.AwaitingKey(w.Agent.ID, peer.ID)); err != nil || strings.Contains(string(e.Value()), "message_id") {
				t.Errorf("awaiting list after the answer: %v, want one without the question", err)
			}
		})
	}
}
