package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/ingress"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

type env struct {
	topo   *events.Topology
	srv    *httptest.Server
	secret string
	ws     string
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func newEnv(t *testing.T, ws string) *env {
	t.Helper()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ingress.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	h, err := ingress.New(ingress.Config{JS: js, WorkspaceID: ws, Secret: secret, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(srv.Close)
	return &env{topo: topo, srv: srv, secret: secret, ws: ws}
}

func inbound(t *testing.T, s jetstream.Stream) []*events.Inbound {
	t.Helper()
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.Inbound
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx(t), seq)
		if err != nil {
			t.Fatal(err)
		}
		in, err := events.DecodeInbound(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, in)
	}
	return out
}

// The OLD platform pushes a canvas message to the registered URL; it is
// queued once (the platform's re-POST of the same messageId is dropped)
// and the caller gets a submitted task, not an invented reply.
func TestPushFromOldPlatform(t *testing.T) {
	plat := moleculetest.NewServer(moleculetest.WithGeneration(moleculetest.Gen2026_04))
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("push-agent")
	e := newEnv(t, ws.ID)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(e.srv.URL, "http://"))
	c, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		t.Fatal(err)
	}
	// The platform refuses loopback IP literals but allows "localhost".
	if _, err := ingress.Register(ctx(t), c, ingress.URL("http://localhost:"+port, e.secret), nil); err != nil {
		t.Fatalf("register push: %v", err)
	}
	body := []byte(`{"jsonrpc":"2.0","id":"req-1","method":"message/send","params":{"message":{"role":"user","messageId":"m-canvas-1","parts":[{"kind":"text","text":"hello by push"}]}}}`)
	for i := range 2 {
		st, resp, err := plat.SendRaw(ctx(t), ws.ID, plat.CanvasHeader(), body)
		if err != nil || st != http.StatusOK {
			t.Fatalf("send %d: %d %s %v", i, st, resp, err)
		}
		var rpc struct {
			ID     string `json:"id"`
			Result struct {
				Kind   string `json:"kind"`
				ID     string `json:"id"`
				Status struct {
					State string `json:"state"`
				} `json:"status"`
			} `json:"result"`
		}
		if err := json.Unmarshal(resp, &rpc); err != nil || rpc.ID != "req-1" || rpc.Result.Kind != "task" ||
			rpc.Result.ID != "m-canvas-1" || rpc.Result.Status.State != "submitted" {
			t.Fatalf("answer %d: %s (%v)", i, resp, err)
		}
	}
	got := inbound(t, e.topo.Inbound)
	if len(got) != 1 {
		t.Fatalf("%d messages queued, want 1", len(got))
	}
	m := got[0]
	if m.Text != "hello by push" || m.Source != events.SourceCanvasUser || m.ActivityID != "m-canvas-1" || m.WorkspaceID != ws.ID || m.MessageID != "m-canvas-1" {
		t.Fatalf("envelope: %+v", m)
	}
}

func TestRefusals(t *testing.T) {
	e := newEnv(t, "ws-1")
	good := `{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"x"}]}}}`
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   string
		status int
		code   int
	}{
		{"wrong secret", http.MethodPost, "/a2a/" + strings.Repeat("A", len(e.secret)), good, http.StatusNotFound, 0},
		{"secret prefix", http.MethodPost, "/a2a/" + e.secret[:len(e.secret)-1], good, http.StatusNotFound, 0},
		{"other path", http.MethodPost, "/" + e.secret, good, http.StatusNotFound, 0},
		{"not a POST", http.MethodGet, "/a2a/" + e.secret, "", http.StatusMethodNotAllowed, 0},
		{"not JSON", http.MethodPost, "/a2a/" + e.secret, "{", http.StatusBadRequest, ingress.CodeParseError},
		{"other method", http.MethodPost, "/a2a/" + e.secret, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}`, http.StatusOK, ingress.CodeMethodNotFound},
		{"malformed parts", http.MethodPost, "/a2a/" + e.secret, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"m2","parts":"x"}}}`, http.StatusOK, ingress.CodeInvalidParams},
		{"over 1 MiB", http.MethodPost, "/a2a/" + e.secret, `{"x":"` + strings.Repeat("a", 1<<20) + `"}`, http.StatusRequestEntityTooLarge, ingress.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx(t), tc.method, e.srv.URL+tc.path, bytes.NewReader([]byte(tc.body)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.code != 0 && !strings.Contains(string(b), `"code":`+strconv.Itoa(tc.code)) {
				t.Fatalf("body %s lacks JSON-RPC code %d", b, tc.code)
			}
		})
	}
	if got := inbound(t, e.topo.Inbound); len(got) != 0 {
		t.Fatalf("%d messages queued by refused requests", len(got))
	}
	// The good request is accepted on the right path.
	resp, err := http.Post(e.srv.URL+"/a2a/"+e.secret, "application/json", strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(inbound(t, e.topo.Inbound)) != 1 {
		t.Fatalf("good request: %d", resp.StatusCode)
	}
}

func TestConfigRefusesWeakSecret(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	for _, s := range []string{"", "short", strings.Repeat("a", 31), strings.Repeat("a", 31) + "/"} {
		if _, err := ingress.New(ingress.Config{JS: js, WorkspaceID: "w", Secret: s}); err == nil {
			t.Errorf("secret %q accepted", s)
		}
	}
}

// SecretFromToken is stable, 43 characters a Handler accepts, different per
// token, and does not contain the token.
func TestSecretFromToken(t *testing.T) {
	const tokA, tokB = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"
	a, b := ingress.SecretFromToken(tokA), ingress.SecretFromToken(tokB)
	if a != ingress.SecretFromToken(tokA) {
		t.Fatal("not stable")
	}
	if a == b || len(a) != 43 || strings.Contains(a, tokA[:8]) {
		t.Fatalf("secrets %q %q", a, b)
	}
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	if _, err := ingress.New(ingress.Config{JS: js, WorkspaceID: "35637291-d55e-4553-896c-13c2e02fe4f7", Secret: a}); err != nil {
		t.Fatalf("derived secret refused: %v", err)
	}
}
