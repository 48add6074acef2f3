//go:build unix

package handler_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

var wantAttachments = []events.Attachment{{URI: "https://files.example/r.pdf", Name: "r.pdf", MimeType: "application/pdf", Size: 1234}}

const answerBody = `{"text":"see attached","attachments":[{"uri":"https://files.example/r.pdf","name":"r.pdf","mime_type":"application/pdf","size":1234}]}`

func answerOf(t *testing.T, h handler.Handler, req *handler.Request) (handler.Answer, error) {
	t.Helper()
	if _, ok := h.(handler.Answerer); !ok {
		t.Fatalf("%v is not a handler.Answerer", h)
	}
	return handler.AnswerOf(testCtx(t), h, req)
}

func TestStructuredAnswerExec(t *testing.T) {
	prog := script(t, `printf '%s' "$ANSWER"`)
	for _, tt := range []struct {
		name, out string
		want      handler.Answer
	}{
		{"text and attachments", answerBody, handler.Answer{Text: "see attached", Attachments: wantAttachments}},
		{"attachments only", `{"attachments":[{"uri":"https://files.example/r.pdf","name":"r.pdf","mime_type":"application/pdf","size":1234}]}`, handler.Answer{Attachments: wantAttachments}},
		{"reply false", `{"text":"thinking out loud","reply":false}`, handler.Answer{Text: "thinking out loud", NoReply: true}},
		{"empty output", "", handler.Answer{NoReply: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := mustParse(t, "exec:"+prog, handler.Options{AnswerJSON: true, Env: []string{"ANSWER=" + tt.out}})
			got, err := answerOf(t, h, newRequest("x"))
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Answer = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// Without the flag the same output is plain text.
	h := mustParse(t, "exec:"+prog, handler.Options{Env: []string{"ANSWER=" + answerBody}})
	if got, err := answerOf(t, h, newRequest("x")); err != nil || got.Text != answerBody || got.Attachments != nil {
		t.Fatalf("text mode Answer = %+v, %v", got, err)
	}
}

func TestStructuredAnswerHTTP(t *testing.T) {
	for _, tt := range []struct {
		name, ctype string
		flag        bool
		want        handler.Answer
	}{
		{"by content type", handler.AnswerContentType + "; charset=utf-8", false, handler.Answer{Text: "see attached", Attachments: wantAttachments}},
		{"by flag", "application/json", true, handler.Answer{Text: "see attached", Attachments: wantAttachments}},
		{"neither: plain json reply rules", "application/json", false, handler.Answer{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				fmt.Fprint(w, answerBody)
			})
			got, err := answerOf(t, mustParse(t, "http:"+s.URL, handler.Options{AnswerJSON: tt.flag}), newRequest("x"))
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Answer = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestStructuredAnswerMalformedIsPermanent(t *testing.T) {
	for _, out := range []string{
		`not json at all`,
		`{"text":"a"} {"text":"b"}`,
		`{"txt":"typo"}`,
		`{"text":42}`,
		`{"attachments":[{"name":"no-uri.txt"}]}`,
		`{}`,
	} {
		t.Run(out, func(t *testing.T) {
			s := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", handler.AnswerContentType)
				fmt.Fprint(w, out)
			})
			a, err := answerOf(t, mustParse(t, "http:"+s.URL, handler.Options{}), newRequest("x"))
			if !errors.Is(err, handler.ErrPermanent) || !a.Empty() {
				t.Fatalf("Answer = %+v, %v; want a permanent error and nothing to post", a, err)
			}
			if !strings.Contains(err.Error(), "structured answer") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
			prog := script(t, `printf '%s' "$ANSWER"`)
			h := mustParse(t, "exec:"+prog, handler.Options{AnswerJSON: true, Env: []string{"ANSWER=" + out}})
			if reply, err := h.Handle(testCtx(t), newRequest("x")); !errors.Is(err, handler.ErrPermanent) || reply != "" {
				t.Fatalf("exec Handle = %q, %v; want a permanent error", reply, err)
			}
		})
	}
}

// endpointAgent is an Agent that only says where its HTTP API is.
type endpointAgent struct {
	handler.Agent
	url, token string
}

func (a endpointAgent) Endpoint() (string, string) { return a.url, a.token }

func TestAgentAPIReachesExecAndHTTP(t *testing.T) {
	req := newRequest("x")
	req.Agent = endpointAgent{url: "http://127.0.0.1:4555", token: "cap-token-1"}

	prog := script(t, `printf '%s %s' "$MOLECULE_AGENT_API" "$MOLECULE_AGENT_TOKEN"`)
	h := mustParse(t, "exec:"+prog, handler.Options{})
	if out, err := h.Handle(testCtx(t), req); err != nil || out != "http://127.0.0.1:4555 cap-token-1" {
		t.Fatalf("exec saw %q, %v", out, err)
	}
	if out, err := h.Handle(testCtx(t), newRequest("x")); err != nil || out != "" {
		t.Fatalf("exec without an agent API saw %q, %v", out, err)
	}

	bodies := make(chan []byte, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
	})
	if _, err := mustParse(t, "http:"+s.URL, handler.Options{}).Handle(testCtx(t), req); err != nil {
		t.Fatal(err)
	}
	var p struct {
		AgentAPI *handler.AgentAPIRef `json:"agent_api"`
	}
	if b := <-bodies; json.Unmarshal(b, &p) != nil || p.AgentAPI == nil || *p.AgentAPI != (handler.AgentAPIRef{URL: "http://127.0.0.1:4555", Token: "cap-token-1"}) {
		t.Fatalf("payload agent_api = %+v", p.AgentAPI)
	}
}
