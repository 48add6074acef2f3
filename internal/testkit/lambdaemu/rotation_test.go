package lambdaemu_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A warm execution environment lives for hours when its function is
// scheduled every minute. It used to keep the workspace token it read from
// the secret at its first invocation: once the old token was revoked,
// every reply of the warm replier was refused with 401 and dead-lettered.
// The function now re-reads its secrets at every invocation (the
// Parameters and Secrets extension caches them) and rebuilds its platform
// clients when a token changed, on the same NATS connection.
func TestWarmEnvironmentUsesRotatedSecret(t *testing.T) {
	dir := functionBinaries(t)
	ns := natstest.Start(t)
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("rotating-agent")

	// The platform, with the old token revocable.
	target, _ := url.Parse(plat.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	var revoked atomic.Value
	revoked.Store("")
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if old := revoked.Load().(string); old != "" && r.Header.Get("Authorization") == "Bearer "+old {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid workspace auth token"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	// The AWS Parameters and Secrets extension, serving the current value.
	const secretARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:relay-tokens"
	var mu sync.Mutex
	current := ws.Token
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Aws-Parameters-Secrets-Token") != "session-token" || r.URL.Path != "/secretsmanager/get" ||
			r.URL.Query().Get("secretId") != secretARN {
			http.Error(w, `{"__type":"ResourceNotFoundException"}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		v := current
		mu.Unlock()
		b, _ := json.Marshal(map[string]any{"Name": "relay-tokens", "SecretString": v})
		_, _ = w.Write(b)
	}))
	t.Cleanup(ext.Close)
	_, extPort, _ := net.SplitHostPort(strings.TrimPrefix(ext.URL, "http://"))

	_, js := natstest.Connect(t, ns.ClientURL())
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := events.EnsureTopology(c, js, events.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	publishReply := func(act string) {
		t.Helper()
		r := events.Reply{WorkspaceID: ws.ID, ActivityID: act, Source: events.SourceCanvasUser, Text: "reply to " + act,
			MessageID: events.ReplyMessageID(act), Hops: 1, HandledAt: time.Now().UTC()}
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(c, events.ReplySubject(ws.ID), data, jetstream.WithMsgID(events.ReplyMsgID(ws.ID, act))); err != nil {
			t.Fatal(err)
		}
	}

	repl := startFunction(t, dir, "replier", []string{
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + front.URL,
		"MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKENS_SECRET=" + secretARN,
		"PARAMETERS_SECRETS_EXTENSION_HTTP_PORT=" + extPort,
		"AWS_SESSION_TOKEN=session-token",
		"MOLECULE_DRAIN_IDLE=300ms",
		"MOLECULE_DRAIN_MARGIN=1s",
	})

	publishReply("act-1")
	if r := repl.mustInvoke(t, replierTimeout); r.Replied != 1 {
		t.Fatalf("first invocation: %+v", r)
	}

	// Rotation: a new token is minted and stored in the secret, the old
	// one revoked.
	st, body, err := moleculetestMint(c, plat.URL(), ws.ID, ws.Token)
	if err != nil || st != http.StatusCreated {
		t.Fatalf("mint: %d %s %v", st, body, err)
	}
	var minted struct {
		AuthToken string `json:"auth_token"`
	}
	if err := json.Unmarshal(body, &minted); err != nil || minted.AuthToken == "" {
		t.Fatalf("mint answer %s: %v", body, err)
	}
	mu.Lock()
	current = minted.AuthToken
	mu.Unlock()
	revoked.Store(ws.Token)

	publishReply("act-2")
	r := repl.mustInvoke(t, replierTimeout)
	if r.Replied != 1 || r.DeadLettered != 0 || !r.Warm {
		t.Fatalf("warm invocation after the token was rotated in the secret: %+v; want the reply posted with the new token (it was refused with the cached, revoked one and dead-lettered)", r)
	}
}

// moleculetestMint mints a second token for ws (POST /workspaces/:id/tokens).
func moleculetestMint(ctx context.Context, base, ws, tok string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/workspaces/"+ws+"/tokens", nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
