package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// server starts an httptest server on 127.0.0.1 answering with fn.
func server(t *testing.T, fn http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(fn)
	t.Cleanup(s.Close)
	return s
}

func TestHTTPRequestShape(t *testing.T) {
	type seen struct {
		method, path, query, ctype, auth, ua string
		body                                 []byte
	}
	got := make(chan seen, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), r.Header.Get("User-Agent"), b}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"reply": "  hi back  ", "extra": 1}`)
	})
	req := newRequest("hello")
	h := mustParse(t, "http:"+s.URL+"/hook?v=2", handler.Options{OpenAIAPIKey: "sk-never-sent"})
	reply, err := h.Handle(testCtx(t), req)
	if err != nil || reply != "hi back" {
		t.Fatalf("Handle = %q, %v", reply, err)
	}
	r := <-got
	if r.method != http.MethodPost || r.path != "/hook" || r.query != "v=2" || r.ctype != "application/json" || r.auth != "" || r.ua == "" {
		t.Fatalf("request: %+v", r)
	}
	var p handler.Payload
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("body is not Payload JSON: %v", err)
	}
	if !reflect.DeepEqual(p.Message, req.Message) || p.Delivery != req.Delivery || !p.Deadline.Equal(req.Deadline) {
		t.Fatalf("body = %s", r.body)
	}
	if strings.Contains(string(r.body), "sk-never-sent") {
		t.Fatal("the OpenAI key leaked into the http: body")
	}
}

func TestHTTPReplyForms(t *testing.T) {
	for _, tt := range []struct {
		name, ctype, body string
		status            int
		want              string
		permanent         bool
		fails             bool
	}{
		{"json reply", "application/json", `{"reply":"ok"}`, 200, "ok", false, false},
		{"json reply without content type", "", `{"reply":"ok"}`, 200, "ok", false, false},
		{"json without reply", "application/json", `{"status":"queued"}`, 200, "", false, false},
		{"json null reply", "application/json", `{"reply":null}`, 200, "", false, false},
		{"json string", "application/json", `"just text"`, 200, "just text", false, false},
		{"json reply not a string", "application/json", `{"reply":42}`, 200, "", true, true},
		{"plain text", "text/plain", "plain answer\n", 200, "plain answer", false, false},
		{"text that looks like json", "text/plain", "{not json", 200, "{not json", false, false},
		{"created", "text/plain", "made", 201, "made", false, false},
		{"no content", "", "", 204, "", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := server(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.ctype != "" {
					w.Header().Set("Content-Type", tt.ctype)
				}
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			})
			reply, err := mustParse(t, "http:"+s.URL, handler.Options{}).Handle(testCtx(t), newRequest("x"))
			if tt.fails {
				if err == nil || errors.Is(err, handler.ErrPermanent) != tt.permanent {
					t.Fatalf("Handle = %q, %v; want failure, permanent=%v", reply, err, tt.permanent)
				}
				return
			}
			if err != nil || reply != tt.want {
				t.Fatalf("Handle = %q, %v; want %q", reply, err, tt.want)
			}
		})
	}
}

func TestHTTPStatusMapping(t *testing.T) {
	for _, tt := range []struct {
		code      int
		permanent bool
	}{
		{400, true}, {401, true}, {403, true}, {404, true}, {409, true}, {422, true},
		{408, false}, {429, false}, {500, false}, {502, false}, {503, false}, {504, false},
	} {
		t.Run(strconv.Itoa(tt.code), func(t *testing.T) {
			s := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(tt.code)
				fmt.Fprint(w, `{"error":"agent says no"}`)
			})
			_, err := mustParse(t, "http:"+s.URL, handler.Options{}).Handle(testCtx(t), newRequest("x"))
			var se *handler.StatusError
			if !errors.As(err, &se) || se.Code != tt.code {
				t.Fatalf("err = %v, want *StatusError %d", err, tt.code)
			}
			if errors.Is(err, handler.ErrPermanent) != tt.permanent {
				t.Fatalf("%d: permanent = %v, want %v", tt.code, !tt.permanent, tt.permanent)
			}
			if se.Message != "agent says no" || se.RetryAfter != 7*time.Second || !strings.Contains(err.Error(), "agent says no") {
				t.Fatalf("status error = %+v", se)
			}
		})
	}
}

func TestHTTPTransportErrorIsRetriedAndRedacted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := mustParse(t, "http:http://user:hunter2@"+addr+"/hook?token=qwerty", handler.Options{})
	if s := fmt.Sprint(h); strings.Contains(s, "hunter2") || strings.Contains(s, "qwerty") {
		t.Fatalf("handler prints its secrets: %s", s)
	}
	_, err = h.Handle(testCtx(t), newRequest("x"))
	if err == nil || errors.Is(err, handler.ErrPermanent) {
		t.Fatalf("err = %v, want a retryable error", err)
	}
	if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "qwerty") || !strings.Contains(msg, addr) {
		t.Fatalf("error = %q: want the host, not the credentials", msg)
	}
}

func TestHTTPTimeoutAndProgress(t *testing.T) {
	stop := make(chan struct{})
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		// Never answers. The body must be read for the server to notice
		// the client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	})
	t.Cleanup(func() { close(stop) }) // runs before the server's Close
	var calls atomic.Int32
	req := newRequest("x")
	req.Progress = func() { calls.Add(1) }
	h := mustParse(t, "http:"+s.URL, handler.Options{Timeout: 300 * time.Millisecond, ProgressInterval: 20 * time.Millisecond})
	start := time.Now()
	_, err := h.Handle(testCtx(t), req)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, handler.ErrPermanent) {
		t.Fatalf("err = %v, want a retryable deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}
	if calls.Load() == 0 {
		t.Fatal("no progress while waiting")
	}
}

func TestHTTPOutputLimit(t *testing.T) {
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("z", 5000))
	})
	_, err := mustParse(t, "http:"+s.URL, handler.Options{MaxOutputBytes: 4096}).Handle(testCtx(t), newRequest("x"))
	if !errors.Is(err, handler.ErrOutputTooLarge) || !errors.Is(err, handler.ErrPermanent) {
		t.Fatalf("err = %v, want ErrOutputTooLarge", err)
	}
}

func TestHandlersRefuseRequestWithoutMessage(t *testing.T) {
	s := server(t, func(w http.ResponseWriter, r *http.Request) { t.Error("server called") })
	for _, spec := range []string{"echo", "http:" + s.URL, "openai:" + s.URL} {
		_, err := mustParse(t, spec, handler.Options{}).Handle(testCtx(t), &handler.Request{Progress: func() {}})
		if !errors.Is(err, handler.ErrPermanent) {
			t.Errorf("%s: err = %v, want ErrPermanent", spec, err)
		}
	}
}
