package lambdaemu_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A function whose NATS credentials are a creds file (operator mode, as a
// managed NATS provisions them) used to write a new file and delete the old
// one whenever only the workspace tokens rotated. The connection was kept,
// but nats.go re-reads the file at every reconnect: after the next NATS
// restart the warm environment could not reconnect until an invocation
// noticed the dead connection and redialled. The file now stays while the
// credentials are unchanged.
func TestTokenOnlyRotationKeepsTheNATSCredsFile(t *testing.T) {
	dir := functionBinaries(t)
	op := natstest.NewOperator(t)
	ns := op.Start(t, t.TempDir(), -1)
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("creds-agent")

	const tokensARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:relay-tokens"
	const natsARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:relay-nats"
	secrets := &secretValues{v: map[string]string{tokensARN: ws.Token, natsARN: op.Creds}}
	extPort := secrets.serve(t)

	_, js := op.Connect(t, ns.ClientURL())
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := events.EnsureTopology(c, js, events.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	repl := startFunction(t, dir, "replier", []string{
		"NATS_URL=" + ns.ClientURL(),
		"NATS_CREDS_SECRET=" + natsARN,
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKENS_SECRET=" + tokensARN,
		"PARAMETERS_SECRETS_EXTENSION_HTTP_PORT=" + extPort,
		"AWS_SESSION_TOKEN=session-token",
		"MOLECULE_DRAIN_IDLE=300ms",
		"MOLECULE_DRAIN_MARGIN=1s",
	})
	if r := repl.mustInvoke(t, replierTimeout); r.Warm {
		t.Fatalf("first invocation: %+v", r)
	}

	// Only the workspace token rotates.
	secrets.set(tokensARN, mintToken(t, c, plat.URL(), ws.ID, ws.Token))
	if r := repl.mustInvoke(t, replierTimeout); !r.Warm || r.Redialled {
		t.Fatalf("invocation after the token rotation: %+v", r)
	}

	// NATS restarts under the warm environment: nats.go reconnects with
	// the creds file, which must still be there.
	ns = ns.Restart(t)
	waitForRelayConnection(t, ns)
	if r := repl.mustInvoke(t, replierTimeout); !r.Warm || r.Redialled {
		t.Fatalf("invocation after the NATS restart: %+v; want the connection reconnected by itself", r)
	}
}

// waitForRelayConnection waits until a relay (a client named
// broker.DefaultClientName) is connected to ns.
func waitForRelayConnection(t *testing.T, ns *natstest.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cz, err := ns.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.Name == broker.DefaultClientName {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the function did not reconnect to the restarted NATS server within 30 s (it cannot when its creds file was deleted)")
		}
		time.Sleep(20 * time.Millisecond) // polling the server's connection list; there is no event to wait on
	}
}

// mintToken mints a second token for ws and returns it.
func mintToken(t *testing.T, ctx context.Context, base, ws, tok string) string {
	t.Helper()
	st, body, err := moleculetestMint(ctx, base, ws, tok)
	if err != nil || st != http.StatusCreated {
		t.Fatalf("mint: %d %s %v", st, body, err)
	}
	var minted struct {
		AuthToken string `json:"auth_token"`
	}
	if err := json.Unmarshal(body, &minted); err != nil || minted.AuthToken == "" {
		t.Fatalf("mint answer %s: %v", body, err)
	}
	return minted.AuthToken
}

// secretValues is the AWS Parameters and Secrets extension's Secrets
// Manager API on loopback, serving values the test can change.
type secretValues struct {
	mu sync.Mutex
	v  map[string]string
}

func (s *secretValues) set(id, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v[id] = v
}

// serve starts the extension and returns its port.
func (s *secretValues) serve(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		v, ok := s.v[r.URL.Query().Get("secretId")]
		s.mu.Unlock()
		if r.Header.Get("X-Aws-Parameters-Secrets-Token") != "session-token" || r.URL.Path != "/secretsmanager/get" || !ok {
			http.Error(w, `{"__type":"ResourceNotFoundException"}`, http.StatusBadRequest)
			return
		}
		b, _ := json.Marshal(map[string]any{"Name": "secret", "SecretString": v})
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	return port
}
