package handler_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

type chatReq struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func TestOpenAIRequestShape(t *testing.T) {
	type seen struct {
		path, auth, ctype string
		body              chatReq
		raw               map[string]any
	}
	got := make(chan seen, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var sn seen
		sn.path, sn.auth, sn.ctype = r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		_ = json.Unmarshal(b, &sn.body)
		_ = json.Unmarshal(b, &sn.raw)
		got <- sn
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"  The answer.  "},"finish_reason":"stop"}]}`)
	})
	h := mustParse(t, "openai:"+s.URL, handler.Options{OpenAIModel: "llama3", OpenAISystemPrompt: "Be brief.", OpenAIAPIKey: "sk-test-123"})
	reply, err := h.Handle(testCtx(t), newRequest("What is it?"))
	if err != nil || reply != "The answer." {
		t.Fatalf("Handle = %q, %v", reply, err)
	}
	r := <-got
	if r.path != "/v1/chat/completions" || r.auth != "Bearer sk-test-123" || r.ctype != "application/json" {
		t.Fatalf("request: path %s auth %q ctype %q", r.path, r.auth, r.ctype)
	}
	want := chatReq{Model: "llama3"}
	want.Messages = append(want.Messages,
		struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{"system", "Be brief."},
		struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{"user", "What is it?"})
	if !reflect.DeepEqual(r.body, want) || len(r.raw) != 2 {
		t.Fatalf("body = %+v (%v), want %+v", r.body, r.raw, want)
	}
}

func TestOpenAIDefaultsNoKeyNoPrompt(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan chatReq, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		var cr chatReq
		_ = json.NewDecoder(r.Body).Decode(&cr)
		got <- r
		bodies <- cr
		fmt.Fprint(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	})
	reply, err := mustParse(t, "openai:"+s.URL, handler.Options{}).Handle(testCtx(t), newRequest("hi"))
	if err != nil || reply != "ok" {
		t.Fatalf("Handle = %q, %v", reply, err)
	}
	r, cr := <-got, <-bodies
	if _, ok := r.Header["Authorization"]; ok {
		t.Fatal("Authorization sent without a key")
	}
	if cr.Model != handler.DefaultOpenAIModel || len(cr.Messages) != 1 || cr.Messages[0].Role != "user" || cr.Messages[0].Content != "hi" {
		t.Fatalf("body = %+v", cr)
	}
}

func TestOpenAIEndpointPath(t *testing.T) {
	paths := make(chan string, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		fmt.Fprint(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	})
	for _, tt := range []struct{ base, want string }{
		{"", "/v1/chat/completions"},
		{"/", "/v1/chat/completions"},
		{"/v1", "/v1/chat/completions"},
		{"/v1/", "/v1/chat/completions"},
		{"/api", "/api/v1/chat/completions"},
		{"/openai/v1", "/openai/v1/chat/completions"},
		{"/v1/chat/completions", "/v1/chat/completions"},
	} {
		if _, err := mustParse(t, "openai:"+s.URL+tt.base, handler.Options{}).Handle(testCtx(t), newRequest("x")); err != nil {
			t.Fatalf("base %q: %v", tt.base, err)
		}
		if got := <-paths; got != tt.want {
			t.Errorf("base %q → %s, want %s", tt.base, got, tt.want)
		}
	}
}

func TestOpenAIErrors(t *testing.T) {
	for _, tt := range []struct {
		code      int
		permanent bool
	}{
		{400, true}, {401, true}, {403, true}, {404, true},
		{429, false}, {500, false}, {502, false}, {503, false},
	} {
		t.Run(strconv.Itoa(tt.code), func(t *testing.T) {
			s := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.code)
				// Some gateways echo the key they refused.
				fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided: sk-live-SECRET","type":"invalid_request_error"}}`)
			})
			_, err := mustParse(t, "openai:"+s.URL, handler.Options{OpenAIAPIKey: "sk-live-SECRET"}).Handle(testCtx(t), newRequest("x"))
			var se *handler.StatusError
			if !errors.As(err, &se) || se.Code != tt.code || errors.Is(err, handler.ErrPermanent) != tt.permanent {
				t.Fatalf("err = %v, want status %d permanent=%v", err, tt.code, tt.permanent)
			}
			if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "Incorrect API key provided") {
				t.Fatalf("error = %q: want the server's message without the key", err)
			}
		})
	}
}

func TestOpenAIResponseForms(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       string
		err        error // nil: success
	}{
		{"null content", `{"choices":[{"message":{"content":null,"tool_calls":[]}}]}`, "", nil},
		{"parts", `{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}}]}`, "ab", nil},
		{"first choice wins", `{"choices":[{"message":{"content":"one"}},{"message":{"content":"two"}}]}`, "one", nil},
		{"no choices", `{"choices":[]}`, "", handler.ErrNoChoices},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := server(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tt.body) })
			reply, err := mustParse(t, "openai:"+s.URL, handler.Options{}).Handle(testCtx(t), newRequest("x"))
			if tt.err != nil {
				if !errors.Is(err, tt.err) || errors.Is(err, handler.ErrPermanent) {
					t.Fatalf("err = %v, want retryable %v", err, tt.err)
				}
				return
			}
			if err != nil || reply != tt.want {
				t.Fatalf("Handle = %q, %v; want %q", reply, err, tt.want)
			}
		})
	}
	s := server(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `<html>gateway</html>`) })
	if _, err := mustParse(t, "openai:"+s.URL, handler.Options{}).Handle(testCtx(t), newRequest("x")); err == nil {
		t.Fatal("an HTML answer was accepted")
	}
}
