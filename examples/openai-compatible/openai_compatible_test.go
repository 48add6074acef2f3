package openaicompatible_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/exampletest"
)

// chatRequest is what the stand-in reads of a chat completion request.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// standIn is an OpenAI-compatible server in the place of Ollama, vLLM or
// hermes: POST /v1/chat/completions, a bearer key when it has one, the
// response object those servers return. It records the requests.
type standIn struct {
	key  string // "" accepts requests without Authorization, as Ollama does
	mu   sync.Mutex
	seen []chatRequest
	auth []string
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.mu.Unlock()
	if s.key != "" && r.Header.Get("Authorization") != "Bearer "+s.key {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Invalid API key","type":"invalid_request_error"}}`)
		return
	}
	last := req.Messages[len(req.Messages)-1].Content
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": req.Model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "stand-in " + req.Model + " read: " + last}}},
		"usage": map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// The openai: handler, configured as the README shows for each server,
// posts the canvas user's message with the model and system prompt to the
// server's /v1/chat/completions, with the key when the server has one, and
// the canvas user gets the server's answer.
func TestOpenAICompatibleServersAnswerThroughRelay(t *testing.T) {
	for _, tc := range []struct {
		name, key, model string
		base             func(url string) string
	}{
		// Ollama: base URL without /v1, no key.
		{"ollama", "", "llama3.2", func(u string) string { return u }},
		// vLLM started with --api-key: base URL ending in /v1.
		{"vllm", "token-abc123", "Qwen/Qwen2.5-1.5B-Instruct", func(u string) string { return u + "/v1" }},
		// hermes gateway's API server: bearer API_SERVER_KEY, model hermes-agent.
		{"hermes", "change-me-local-dev", "hermes-agent", func(u string) string { return u + "/v1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &standIn{key: tc.key}
			srv := httptest.NewServer(s)
			defer srv.Close()
			environ := []string{"MOLECULE_HANDLER=openai:" + tc.base(srv.URL), "MOLECULE_OPENAI_MODEL=" + tc.model,
				"MOLECULE_SYSTEM_PROMPT=You answer in one line."}
			if tc.key != "" {
				environ = append(environ, "OPENAI_API_KEY="+tc.key)
			}
			got := exampletest.Ask(t, environ, "what is 6 x 7?")
			if want := "stand-in " + tc.model + " read: what is 6 x 7?"; got != want {
				t.Errorf("answer %q, want %q", got, want)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.seen) != 1 {
				t.Fatalf("the server got %d requests, want 1", len(s.seen))
			}
			req := s.seen[0]
			if req.Model != tc.model || len(req.Messages) != 2 || req.Messages[0].Role != "system" ||
				req.Messages[0].Content != "You answer in one line." || req.Messages[1].Role != "user" {
				t.Errorf("request %+v, want the model, the system prompt, then the user's message", req)
			}
			wantAuth := ""
			if tc.key != "" {
				wantAuth = "Bearer " + tc.key
			}
			if s.auth[0] != wantAuth {
				t.Errorf("Authorization %q, want %q", s.auth[0], wantAuth)
			}
		})
	}
}
