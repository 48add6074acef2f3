package console_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// secretText is the text of the dead letter every fixture holds: no
// answer may carry it unless a reveal asked for it.
const secretText = "the user's private words"

// fixture is a console on a real embedded NATS with one dead letter,
// served by httptest on loopback, and its log.
type fixture struct {
	srv  *httptest.Server
	url  string // the console's address, without the final slash
	logs *syncBuffer
	nc   *nats.Conn
	js   jetstream.JetStream
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// newFixture serves a console with opts; each edit, if any, changes opts
// with the fixture's NATS at hand (to open the workspace registry on it).
func newFixture(t *testing.T, opts console.Options, edit ...func(jetstream.JetStream, *console.Options)) *fixture {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := natstest.Connect(t, ns.ClientURL())
	ctx := pipelinetest.Ctx(t)
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]any{"v": 1, "workspace_id": "ws-1", "activity_id": "act-1", "source": "canvas_user", "text": secretText})
	if err := dlq.Publish(ctx, js, events.DeadLetter{Stage: events.StageDispatcher, WorkspaceID: "ws-1", ActivityID: "act-1", Reason: events.ReasonPermanent,
		Error: "handler refused", Deliveries: 1, OriginalSubject: events.InboundSubject("ws-1"), Envelope: in}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{logs: &syncBuffer{}, nc: nc, js: js}
	opts.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, e := range edit {
		e(js, &opts)
	}
	c, err := console.New(js, topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f.srv = httptest.NewServer(c)
	t.Cleanup(f.srv.Close)
	f.url = f.srv.URL
	return f
}

// browserClient keeps cookies and does not follow redirects.
func browserClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) do(t *testing.T, c *http.Client, method, path string, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login signs in with the token and returns the page's CSRF token.
func (f *fixture) login(t *testing.T, c *http.Client, token string) string {
	t.Helper()
	resp, _ := f.do(t, c, "POST", "/login", url.Values{"token": {token}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return f.csrf(t, c)
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([0-9a-f]+)">`)

func (f *fixture) csrf(t *testing.T, c *http.Client, header ...string) string {
	t.Helper()
	resp, page := f.do(t, c, "GET", "/", "", header...)
	m := csrfMeta.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("page: %d, no CSRF token in it", resp.StatusCode)
	}
	return m[1]
}
