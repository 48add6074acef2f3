package agentapi_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// TestCapabilityTokenOfAnotherOrEndedMessageIs401 runs two messages
// through the real pipeline: the second handler presents the first
// message's token (its handler returned) and gets 401, its own gets 200.
// A session past its deadline, an unknown token and none get 401 too.
func TestCapabilityTokenOfAnotherOrEndedMessageIs401(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	srv := startAPI(t, w, agentapi.Config{})
	var mu sync.Mutex
	var firstToken string
	statuses := map[string]int{}
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		url, tok := endpoint(t, req.Agent)
		mu.Lock()
		defer mu.Unlock()
		if firstToken == "" {
			firstToken = tok
			st, _ := call(t, http.MethodGet, url+"/v1/peers", tok, "")
			statuses["first, own token"] = st
			return "", nil
		}
		statuses["second, first message's token"], _ = call(t, http.MethodGet, url+"/v1/peers", firstToken, "")
		statuses["second, own token"], _ = call(t, http.MethodGet, url+"/v1/peers", tok, "")
		return "", nil
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Agent: srv}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	for _, text := range []string{"one", "two"} {
		if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, text); err != nil {
			t.Fatal(err)
		}
		pipelinetest.Eventually(t, 20*time.Second, "message handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(statuses) == map[string]int{"one": 1, "two": 3}[text]
		})
	}
	want := map[string]int{"first, own token": 200, "second, first message's token": 401, "second, own token": 200}
	for k, v := range want {
		if statuses[k] != v {
			t.Errorf("%s: status %d, want %d", k, statuses[k], v)
		}
	}

	// Expiry: a session whose deadline passed is refused although its
	// handler has not returned.
	agent, end := srv.Open(pipelinetest.Ctx(t), canvasMessage(w), time.Now().Add(300*time.Millisecond))
	defer end()
	url, tok := endpoint(t, agent)
	if st, body := call(t, http.MethodGet, url+"/v1/peers", tok, ""); st != http.StatusOK {
		t.Fatalf("live session: %d %s", st, body)
	}
	pipelinetest.Eventually(t, 5*time.Second, "expired token refused", func() bool {
		st, _ := call(t, http.MethodGet, url+"/v1/peers", tok, "")
		return st == http.StatusUnauthorized
	})
	if _, err := agent.Peers(pipelinetest.Ctx(t)); !errors.Is(err, agentapi.ErrSessionEnded) {
		t.Errorf("Go call after the deadline: %v, want ErrSessionEnded", err)
	}
	for _, bad := range []string{"", "not-a-token", tok + "x"} {
		if st, body := call(t, http.MethodGet, url+"/v1/peers", bad, ""); st != http.StatusUnauthorized || !strings.Contains(string(body), "MOLECULE_AGENT_TOKEN") {
			t.Errorf("token %q: %d %s, want 401 saying which token to send", bad, st, body)
		}
	}
}

// TestAgentAPIListensOnLoopbackOnly: a non-loopback address is a
// configuration error; the default listens on 127.0.0.1.
func TestAgentAPIListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.7:8080", "localhost:0", "example.com:80", "127.0.0.1"} {
		if _, err := agentapi.New(agentapi.Config{Listen: addr}); !errors.Is(err, agentapi.ErrInvalidConfig) {
			t.Errorf("New(Listen %q) = %v, want ErrInvalidConfig", addr, err)
		}
		if err := (agentapi.Settings{AgentAPIListen: addr}).Validate(); !errors.Is(err, agentapi.ErrInvalidConfig) || !strings.Contains(err.Error(), "MOLECULE_AGENT_API_LISTEN") {
			t.Errorf("Settings.Validate(%q) = %v, want an error naming the variable", addr, err)
		}
	}
	srv, err := agentapi.New(agentapi.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL(), "http://"))
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("default URL %s is not on a loopback address", srv.URL())
	}
}

// TestNoWorkspaceTokenInHandlerEnvOrPayload runs the real exec: and
// http: handlers from the dispatcher with the agent API on: each gets the
// API's URL and a capability token, and the workspace token appears
// nowhere in the program's environment, its stdin or the POST body.
func TestNoWorkspaceTokenInHandlerEnvOrPayload(t *testing.T) {
	t.Setenv("MOLECULE_WORKSPACE_TOKEN", "leaked-from-the-relay-env")
	w := pipelinetest.New(t, pipelinetest.Options{})
	srv := startAPI(t, w, agentapi.Config{})
	dir := t.TempDir()
	execH, err := handler.Parse("exec:"+script(t, `env > "$OUT/env"; cat > "$OUT/stdin"`), handler.Options{Env: []string{"OUT=" + dir}})
	if err != nil {
		t.Fatal(err)
	}
	posted := make(chan []byte, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posted <- b
	}))
	defer hs.Close()
	httpH, err := handler.Parse("http:"+hs.URL, handler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	both := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		if _, err := execH.Handle(ctx, req); err != nil {
			return "", err
		}
		return httpH.Handle(ctx, req)
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: both, Dispatcher: dispatcher.Config{Agent: srv}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, "show me your env"); err != nil {
		t.Fatal(err)
	}
	var body []byte
	select {
	case body = <-posted:
	case <-time.After(20 * time.Second):
		t.Fatal("the http: handler was not called")
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	stdin, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	for name, data := range map[string][]byte{"exec environment": env, "exec stdin": stdin, "http body": body} {
		s := string(data)
		if strings.Contains(s, w.Agent.Token) || strings.Contains(s, "leaked-from-the-relay-env") {
			t.Errorf("%s holds the workspace token:\n%s", name, s)
		}
		if !strings.Contains(s, srv.URL()) {
			t.Errorf("%s lacks the agent API URL %s:\n%s", name, srv.URL(), s)
		}
	}
	if !strings.Contains(string(env), "MOLECULE_AGENT_TOKEN=") || !strings.Contains(string(env), "MOLECULE_AGENT_API="+srv.URL()) {
		t.Errorf("exec environment lacks the agent API variables:\n%s", env)
	}
	if !strings.Contains(string(body), `"agent_api":{"url":"`+srv.URL()+`","token":"`) {
		t.Errorf("http body lacks agent_api: %s", body)
	}
}

// TestSecretsForbiddenUnlessEnabled: GET /v1/secrets is 403 with a
// message naming the switch, until MOLECULE_AGENT_API_SECRETS is on.
func TestSecretsForbiddenUnlessEnabled(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	w.Plat.SetSecret(w.Agent.ID, "MY_API_KEY", "sk-local-123")
	for _, on := range []bool{false, true} {
		srv := startAPI(t, w, agentapi.Config{Secrets: on})
		agent, end := srv.Open(pipelinetest.Ctx(t), canvasMessage(w), time.Now().Add(time.Minute))
		url, tok := endpoint(t, agent)
		st, body := call(t, http.MethodGet, url+"/v1/secrets", tok, "")
		end()
		switch {
		case !on && (st != http.StatusForbidden || !strings.Contains(string(body), "MOLECULE_AGENT_API_SECRETS=true")):
			t.Errorf("secrets off: %d %s, want 403 naming MOLECULE_AGENT_API_SECRETS=true", st, body)
		case on && (st != http.StatusOK || !strings.Contains(string(body), `"MY_API_KEY":"sk-local-123"`)):
			t.Errorf("secrets on: %d %s", st, body)
		}
	}
}
