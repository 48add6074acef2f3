package molecule_test

// Wire-level tests against a tiny httptest server: the behaviours the
// platform double cannot show (malformed and oversized bodies, exact
// headers, transport failures, retry timing). The protocol behaviours run
// against moleculetest in client_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

const (
	wireWS    = "11111111-1111-4111-8111-111111111111"
	wireToken = "tok-SECRET-0123456789abcdefghijklmnopqrstuvw"
)

// captured is one request seen by a wire server.
type captured struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// wireServer is an httptest server that records requests and answers with h.
type wireServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []captured
}

func newWire(t *testing.T, h http.HandlerFunc) *wireServer {
	t.Helper()
	ws := &wireServer{}
	ws.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ws.mu.Lock()
		ws.reqs = append(ws.reqs, captured{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), b})
		ws.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		h(w, r)
	}))
	t.Cleanup(ws.Close)
	return ws
}

func (ws *wireServer) requests() []captured {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]captured(nil), ws.reqs...)
}

func (ws *wireServer) last(t *testing.T) captured {
	t.Helper()
	r := ws.requests()
	if len(r) == 0 {
		t.Fatal("no request reached the server")
	}
	return r[len(r)-1]
}

// wireClient returns a client for ws with fast retries.
func wireClient(t *testing.T, url string, mod func(*molecule.Config)) *molecule.Client {
	t.Helper()
	cfg := molecule.Config{
		PlatformURL:       url,
		WorkspaceID:       wireWS,
		Token:             wireToken,
		RetryBaseInterval: time.Millisecond,
		MaxBackoff:        50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := molecule.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func jsonAnswer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	good := molecule.Config{PlatformURL: "https://acme.example", WorkspaceID: wireWS, Token: wireToken}
	cases := []struct {
		name string
		mod  func(*molecule.Config)
	}{
		{"no url", func(c *molecule.Config) { c.PlatformURL = "" }},
		{"ftp url", func(c *molecule.Config) { c.PlatformURL = "ftp://acme.example" }},
		{"no host", func(c *molecule.Config) { c.PlatformURL = "https://" }},
		{"not a url", func(c *molecule.Config) { c.PlatformURL = "http://[::1" }},
		{"query", func(c *molecule.Config) { c.PlatformURL = "https://acme.example/?token=" + wireToken }},
		{"no workspace", func(c *molecule.Config) { c.WorkspaceID = " " }},
		{"no token", func(c *molecule.Config) { c.Token = "" }},
		{"token with newline", func(c *molecule.Config) { c.Token = wireToken + "\n" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.mod(&cfg)
			c, err := molecule.New(cfg)
			if !errors.Is(err, molecule.ErrInvalidArgument) {
				t.Fatalf("New = %v, %v; want ErrInvalidArgument", c, err)
			}
			if strings.Contains(err.Error(), wireToken) {
				t.Fatalf("error leaks the token: %v", err)
			}
		})
	}
	c, err := molecule.New(good)
	if err != nil {
		t.Fatalf("New(good): %v", err)
	}
	if c.WorkspaceID() != wireWS {
		t.Fatalf("WorkspaceID = %q", c.WorkspaceID())
	}
	if c.RateLimit().Known {
		t.Fatal("RateLimit known before any request")
	}
}

func TestHeadersOnEveryRequest(t *testing.T) {
	ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/activity"):
			io.WriteString(w, "[]")
		case strings.HasSuffix(r.URL.Path, "/peers"):
			io.WriteString(w, "[]")
		case strings.HasPrefix(r.URL.Path, "/registry/discover/"):
			io.WriteString(w, `{"id":"x","url":""}`)
		case strings.HasSuffix(r.URL.Path, "/a2a"):
			io.WriteString(w, `{"status":"queued"}`)
		default:
			io.WriteString(w, `{}`)
		}
	})
	c := wireClient(t, ws.URL+"/", func(c *molecule.Config) { c.OrgID = "org-7"; c.UserAgent = "relay-test/1" })
	ctx := context.Background()
	calls := map[string]func() error{
		"register":  func() error { _, err := c.Register(ctx, molecule.RegisterRequest{}); return err },
		"heartbeat": func() error { _, err := c.Heartbeat(ctx, molecule.Heartbeat{}); return err },
		"state":     func() error { _, err := c.State(ctx); return err },
		"secrets":   func() error { _, err := c.Secrets(ctx); return err },
		"peers":     func() error { _, err := c.Peers(ctx, ""); return err },
		"discover":  func() error { _, err := c.Discover(ctx, "x"); return err },
		"card":      func() error { return c.UpdateCard(ctx, map[string]string{"name": "a"}) },
		"activity":  func() error { _, err := c.Activity(ctx, molecule.ActivityQuery{}); return err },
		"notify":    func() error { _, err := c.Notify(ctx, "hi", nil); return err },
		"a2a": func() error {
			_, err := c.SendA2A(ctx, molecule.A2AMessage{To: "x", Text: "t", MessageID: "m"})
			return err
		},
		"workspace": func() error { _, err := c.Workspace(ctx, wireWS); return err },
	}
	for name, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := ws.last(t)
		if got := r.Header.Get("X-Molecule-Org-Id"); got != "org-7" {
			t.Errorf("%s: X-Molecule-Org-Id = %q", name, got)
		}
		if got := r.Header.Get("Origin"); got != ws.URL {
			t.Errorf("%s: Origin = %q, want %q", name, got, ws.URL)
		}
		if got := r.Header.Get("User-Agent"); got != "relay-test/1" {
			t.Errorf("%s: User-Agent = %q", name, got)
		}
		wantAuth := "Bearer " + wireToken
		if name == "workspace" {
			wantAuth = ""
		}
		if got := r.Header.Get("Authorization"); got != wantAuth {
			t.Errorf("%s: Authorization = %q, want %q", name, got, wantAuth)
		}
		if strings.HasPrefix(r.Path, "//") {
			t.Errorf("%s: path %q has a doubled slash", name, r.Path)
		}
	}
}

func TestRateLimitRecorded(t *testing.T) {
	limit := "600"
	ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", limit)
		w.Header().Set("X-RateLimit-Remaining", "597")
		w.Header().Set("X-RateLimit-Reset", "42")
		io.WriteString(w, "[]")
	})
	c := wireClient(t, ws.URL, nil)
	before := time.Now()
	page, err := c.Activity(context.Background(), molecule.ActivityQuery{})
	if err != nil {
		t.Fatal(err)
	}
	rl := c.RateLimit()
	if !rl.Known || rl.Limit != 600 || rl.Remaining != 597 || rl.Reset != 42*time.Second {
		t.Fatalf("RateLimit = %+v", rl)
	}
	if rl.ResetAt().Before(before.Add(42 * time.Second)) {
		t.Fatalf("ResetAt %v too early", rl.ResetAt())
	}
	if page.RateLimit.Remaining != 597 {
		t.Fatalf("page.RateLimit = %+v", page.RateLimit)
	}
	limit = "unlimited"
	if _, err := c.State(context.Background()); err == nil {
		t.Fatal("State decoded an array")
	}
	if rl := c.RateLimit(); rl.Limit != molecule.RateUnlimited || rl.Remaining != molecule.RateUnlimited {
		t.Fatalf("unlimited RateLimit = %+v", rl)
	}
}

func TestOversizedBodyIsAnError(t *testing.T) {
	big := "[" + strings.Repeat(`{"id":"x"},`, 200) + `{"id":"y"}]`
	ws := newWire(t, jsonAnswer(200, big))
	c := wireClient(t, ws.URL, func(c *molecule.Config) { c.MaxResponseBytes = 1024 })
	_, err := c.Activity(context.Background(), molecule.ActivityQuery{})
	if !errors.Is(err, molecule.ErrResponseTooLarge) {
		t.Fatalf("err = %v; want ErrResponseTooLarge", err)
	}
	// An oversized error body still classifies by status, truncated.
	ws2 := newWire(t, jsonAnswer(404, strings.Repeat("x", 4000)))
	c2 := wireClient(t, ws2.URL, func(c *molecule.Config) { c.MaxResponseBytes = 1024 })
	_, err = c2.State(context.Background())
	var ae *molecule.APIError
	if !errors.As(err, &ae) || !errors.Is(err, molecule.ErrNotFound) {
		t.Fatalf("err = %v; want APIError ErrNotFound", err)
	}
	if len(ae.Body) != 512 {
		t.Fatalf("APIError.Body has %d bytes, want 512", len(ae.Body))
	}
}

func TestMalformedBodies(t *testing.T) {
	cases := []struct {
		name string
		body string
		call func(*molecule.Client) error
	}{
		{"activity object", `{"rows":[]}`, func(c *molecule.Client) error {
			_, err := c.Activity(context.Background(), molecule.ActivityQuery{})
			return err
		}},
		{"activity null", `null`, func(c *molecule.Client) error {
			_, err := c.Activity(context.Background(), molecule.ActivityQuery{})
			return err
		}},
		{"activity html", `<html>canvas</html>`, func(c *molecule.Client) error {
			_, err := c.Activity(context.Background(), molecule.ActivityQuery{})
			return err
		}},
		{"state", `[1]`, func(c *molecule.Client) error { _, err := c.State(context.Background()); return err }},
		{"secrets", `{"K":1}`, func(c *molecule.Client) error { _, err := c.Secrets(context.Background()); return err }},
		{"peers", `{}`, func(c *molecule.Client) error { _, err := c.Peers(context.Background(), ""); return err }},
		{"register", `nope`, func(c *molecule.Client) error {
			_, err := c.Register(context.Background(), molecule.RegisterRequest{})
			return err
		}},
		{"heartbeat", `nope`, func(c *molecule.Client) error {
			_, err := c.Heartbeat(context.Background(), molecule.Heartbeat{})
			return err
		}},
		{"notify", `nope`, func(c *molecule.Client) error {
			_, err := c.Notify(context.Background(), "x", nil)
			return err
		}},
		{"workspace", `nope`, func(c *molecule.Client) error {
			_, err := c.Workspace(context.Background(), wireWS)
			return err
		}},
		{"discover", `nope`, func(c *molecule.Client) error {
			_, err := c.Discover(context.Background(), "peer")
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWire(t, jsonAnswer(200, tc.body))
			c := wireClient(t, ws.URL, nil)
			err := tc.call(c)
			if !errors.Is(err, molecule.ErrPlatformUnavailable) {
				t.Fatalf("err = %v; want ErrPlatformUnavailable", err)
			}
			if !strings.Contains(err.Error(), "/") {
				t.Fatalf("error does not name the endpoint: %v", err)
			}
			if n := len(ws.requests()); n != 1 {
				t.Fatalf("malformed body retried: %d requests", n)
			}
		})
	}
}

func TestActivityRowsOrderedOldestFirst(t *testing.T) {
	row := func(id, ts string) string { return fmt.Sprintf(`{"id":%q,"created_at":%q}`, id, ts) }
	cases := []struct {
		name     string
		body     string
		want     []string
		wantDesc bool
	}{
		{"ascending kept", "[" + row("a", "2026-05-01T00:00:01.000001Z") + "," + row("b", "2026-05-01T00:00:02Z") + "]", []string{"a", "b"}, false},
		{"descending reversed", "[" + row("c", "2026-05-01T00:00:03Z") + "," + row("b", "2026-05-01T00:00:02Z") + "," + row("a", "2026-05-01T00:00:01Z") + "]", []string{"a", "b", "c"}, true},
		{"ties keep server order", "[" + row("x", "2026-05-01T00:00:01Z") + "," + row("y", "2026-05-01T00:00:01Z") + "," + row("z", "2026-05-01T00:00:02Z") + "]", []string{"x", "y", "z"}, false},
		{"out of order sorted", "[" + row("b", "2026-05-01T00:00:02Z") + "," + row("a", "2026-05-01T00:00:01Z") + "," + row("c", "2026-05-01T00:00:03Z") + "]", []string{"a", "b", "c"}, false},
		{"malformed rows kept in place", "[" + row("c", "2026-05-01T00:00:03Z") + `,42,{"id":7},` + row("bad", "yesterday") + "," + row("a", "2026-05-01T00:00:01Z") + "]", []string{"a", "bad", "", "", "c"}, true},
		{"empty", "[]", []string{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWire(t, jsonAnswer(200, tc.body))
			c := wireClient(t, ws.URL, nil)
			page, err := c.Activity(context.Background(), molecule.ActivityQuery{Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, r := range page.Rows {
				got = append(got, r.ID)
				if !json.Valid(r.JSON) {
					t.Errorf("row JSON not kept raw: %s", r.JSON)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("ids = %v, want %v", got, tc.want)
			}
			if page.Descending != tc.wantDesc {
				t.Fatalf("Descending = %v, want %v", page.Descending, tc.wantDesc)
			}
			if page.Full != (len(tc.want) == 5) {
				t.Fatalf("Full = %v with %d rows", page.Full, len(tc.want))
			}
			if n := page.Newest(); (n == nil) != (len(tc.want) == 0) {
				t.Fatalf("Newest = %v", n)
			}
		})
	}
}

func TestActivityQueryParameters(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, "[]"))
	c := wireClient(t, ws.URL, nil)
	before := time.Date(2026, 5, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	page, err := c.Activity(context.Background(), molecule.ActivityQuery{
		Type: "a2a_receive", SinceID: "cur", Limit: 500, SinceSecs: 30, PeerID: "p",
		BeforeTS: before, Source: "canvas", IncludePeerInfo: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "before_ts=2026-05-01T11%3A00%3A00Z&include=peer_info&limit=500&peer_id=p&since_id=cur&since_secs=30&source=canvas&type=a2a_receive"
	if q := ws.last(t).Query; q != want {
		t.Fatalf("query = %s\nwant    %s", q, want)
	}
	if page.Limit != 500 || page.Full {
		t.Fatalf("page = %+v", page)
	}
	page, err = c.Activity(context.Background(), molecule.ActivityQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if q := ws.last(t).Query; q != "" {
		t.Fatalf("empty query sent %q", q)
	}
	if page.Limit != 100 {
		t.Fatalf("default Limit = %d, want 100", page.Limit)
	}
	for _, q := range []molecule.ActivityQuery{{Limit: 501}, {Limit: -1}, {SinceSecs: -5}, {Source: "user"}} {
		if _, err := c.Activity(context.Background(), q); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Fatalf("Activity(%+v) = %v; want ErrInvalidArgument", q, err)
		}
	}
	if n := len(ws.requests()); n != 2 {
		t.Fatalf("refused queries reached the server: %d requests", n)
	}
}

// TestErrorKinds checks the sentinel of each status, one error type per row.
func TestErrorKinds(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		header map[string]string
		call   string // "activity" or "state" or "notify"
		want   error
		retry  time.Duration
		msg    string
	}{
		{"401 unauthorized", 401, `{"error":"invalid workspace auth token"}`, nil, "state", molecule.ErrUnauthorized, 0, "invalid workspace auth token"},
		{"410 cursor lost", 410, `{"error":"since_id cursor not found"}`, nil, "activity", molecule.ErrCursorLost, 0, "since_id cursor not found"},
		{"429 header", 429, `{"error":"rate limit exceeded","retry_after":58}`, map[string]string{"Retry-After": "7"}, "notify", molecule.ErrRateLimited, 7 * time.Second, "rate limit exceeded"},
		{"429 body only", 429, `{"error":"rate limit exceeded","retry_after":58}`, nil, "notify", molecule.ErrRateLimited, 58 * time.Second, ""},
		{"502", 502, `{"error":"failed to reach workspace agent"}`, nil, "notify", molecule.ErrPlatformUnavailable, 0, ""},
		{"503 with code", 503, `{"error":"platform datastore unavailable","code":"platform_unavailable"}`, nil, "notify", molecule.ErrPlatformUnavailable, 0, ""},
		{"504", 504, ``, nil, "notify", molecule.ErrPlatformUnavailable, 0, "(empty body)"},
		{"404 empty is tenant routing", 404, ``, nil, "state", molecule.ErrTenantRouting, 0, ""},
		{"404 body is not found", 404, `{"error":"workspace not found"}`, nil, "notify", molecule.ErrNotFound, 0, ""},
		{"404 deleted state is removed", 404, `{"deleted":true,"status":"removed"}`, nil, "state", molecule.ErrWorkspaceRemoved, 0, ""},
		{"400 plain", 400, `{"error":"message is required"}`, nil, "notify", nil, 0, "message is required"},
	}
	sentinels := []error{molecule.ErrUnauthorized, molecule.ErrCursorLost, molecule.ErrRateLimited,
		molecule.ErrPlatformUnavailable, molecule.ErrTenantRouting, molecule.ErrNotFound, molecule.ErrWorkspaceRemoved}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			c := wireClient(t, ws.URL, func(c *molecule.Config) { c.MaxRetries = -1 })
			var err error
			switch tc.call {
			case "activity":
				_, err = c.Activity(context.Background(), molecule.ActivityQuery{SinceID: "x"})
			case "state":
				_, err = c.State(context.Background())
			case "notify":
				_, err = c.Notify(context.Background(), "x", nil)
			}
			var ae *molecule.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v; want *APIError", err)
			}
			if ae.StatusCode != tc.status || molecule.StatusOf(err) != tc.status {
				t.Fatalf("status = %d", ae.StatusCode)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == tc.want) {
					t.Errorf("errors.Is(err, %v) = %v", s, errors.Is(err, s))
				}
			}
			if molecule.RetryAfterOf(err) != tc.retry {
				t.Errorf("RetryAfter = %v, want %v", molecule.RetryAfterOf(err), tc.retry)
			}
			if !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), wireToken) {
				t.Errorf("Error() = %q", err.Error())
			}
			if strings.Contains(ae.Path, "?") {
				t.Errorf("Path holds the query: %q", ae.Path)
			}
		})
	}
}

func TestAPIErrorBodyTruncatedToValidUTF8(t *testing.T) {
	body := strings.Repeat("é", 400) // 800 bytes
	ws := newWire(t, jsonAnswer(500, body))
	c := wireClient(t, ws.URL, nil)
	_, err := c.State(context.Background())
	var ae *molecule.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v", err)
	}
	if len(ae.Body) != 512 || !strings.HasPrefix(body, ae.Body) {
		t.Fatalf("Body has %d bytes", len(ae.Body))
	}
	if errors.Unwrap(err) != nil {
		t.Fatalf("500 matched %v", errors.Unwrap(err))
	}
}

func TestRetryPolicy(t *testing.T) {
	t.Run("GET retried until success", func(t *testing.T) {
		var n atomic.Int32
		ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
			switch n.Add(1) {
			case 1:
				w.WriteHeader(503)
			case 2:
				w.WriteHeader(429)
			default:
				io.WriteString(w, `{"status":"online"}`)
			}
		})
		c := wireClient(t, ws.URL, nil)
		st, err := c.State(context.Background())
		if err != nil || st.Status != "online" {
			t.Fatalf("State = %+v, %v", st, err)
		}
		if n.Load() != 3 {
			t.Fatalf("%d attempts, want 3", n.Load())
		}
	})
	t.Run("GET gives up after MaxRetries", func(t *testing.T) {
		ws := newWire(t, jsonAnswer(502, `{"error":"bad gateway"}`))
		c := wireClient(t, ws.URL, func(c *molecule.Config) { c.MaxRetries = 2 })
		_, err := c.Secrets(context.Background())
		if !errors.Is(err, molecule.ErrPlatformUnavailable) {
			t.Fatalf("err = %v", err)
		}
		if n := len(ws.requests()); n != 3 {
			t.Fatalf("%d attempts, want 3", n)
		}
	})
	t.Run("non-retryable status is not retried", func(t *testing.T) {
		ws := newWire(t, jsonAnswer(401, `{"error":"invalid workspace auth token"}`))
		c := wireClient(t, ws.URL, nil)
		if _, err := c.State(context.Background()); !errors.Is(err, molecule.ErrUnauthorized) {
			t.Fatalf("err = %v", err)
		}
		if n := len(ws.requests()); n != 1 {
			t.Fatalf("%d attempts, want 1", n)
		}
	})
	t.Run("POST never re-sent", func(t *testing.T) {
		ws := newWire(t, jsonAnswer(503, `{"error":"busy"}`))
		c := wireClient(t, ws.URL, nil)
		calls := []func() error{
			func() error { _, err := c.Notify(context.Background(), "x", nil); return err },
			func() error { _, err := c.Heartbeat(context.Background(), molecule.Heartbeat{}); return err },
			func() error {
				_, err := c.SendA2A(context.Background(), molecule.A2AMessage{To: "p", Text: "x", MessageID: "m"})
				return err
			},
			func() error { _, err := c.Register(context.Background(), molecule.RegisterRequest{}); return err },
			func() error { return c.UpdateCard(context.Background(), map[string]any{}) },
		}
		for i, call := range calls {
			if err := call(); !errors.Is(err, molecule.ErrPlatformUnavailable) {
				t.Fatalf("call %d: err = %v", i, err)
			}
			if n := len(ws.requests()); n != i+1 {
				t.Fatalf("call %d: %d requests; a POST was re-sent", i, n)
			}
		}
	})
	t.Run("Retry-After longer than MaxBackoff returns at once", func(t *testing.T) {
		ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "58")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":"rate limit exceeded","retry_after":58}`)
		})
		c := wireClient(t, ws.URL, func(c *molecule.Config) { c.MaxBackoff = 10 * time.Second })
		start := time.Now()
		_, err := c.State(context.Background())
		if !errors.Is(err, molecule.ErrRateLimited) || molecule.RetryAfterOf(err) != 58*time.Second {
			t.Fatalf("err = %v", err)
		}
		if time.Since(start) > 5*time.Second || len(ws.requests()) != 1 {
			t.Fatalf("waited %v and sent %d requests", time.Since(start), len(ws.requests()))
		}
	})
	t.Run("wait past the deadline returns at once", func(t *testing.T) {
		ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(429)
		})
		c := wireClient(t, ws.URL, func(c *molecule.Config) { c.MaxBackoff = time.Minute })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.State(ctx)
		if !errors.Is(err, molecule.ErrRateLimited) {
			t.Fatalf("err = %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("slept until the deadline instead of returning")
		}
	})
	t.Run("cancel while waiting", func(t *testing.T) {
		ws := newWire(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
		waiting := make(chan struct{})
		var once sync.Once
		c := wireClient(t, ws.URL, func(c *molecule.Config) {
			c.RetryBaseInterval = time.Hour
			c.MaxBackoff = time.Hour
			c.Logger = slog.New(&signalHandler{msg: "molecule: retrying GET", fire: func() { once.Do(func() { close(waiting) }) }})
		})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := c.State(ctx); errc <- err }()
		select {
		case <-waiting:
		case <-time.After(5 * time.Second):
			t.Fatal("no retry wait started")
		}
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) || !errors.Is(err, molecule.ErrPlatformUnavailable) {
				t.Fatalf("err = %v; want context.Canceled and the last failure", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("State did not return after cancel")
		}
	})
	t.Run("transport error retried and classified", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		c := wireClient(t, "http://"+addr, nil)
		_, err = c.State(context.Background())
		if !errors.Is(err, molecule.ErrPlatformUnavailable) {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), wireToken) {
			t.Fatal("token in error")
		}
	})
	t.Run("request timeout is platform unavailable", func(t *testing.T) {
		release := make(chan struct{})
		ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		c := wireClient(t, ws.URL, func(c *molecule.Config) {
			c.RequestTimeout = 50 * time.Millisecond
			c.MaxRetries = -1
		})
		if _, err := c.State(context.Background()); !errors.Is(err, molecule.ErrPlatformUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestWorkspaceRemovedShapes(t *testing.T) {
	ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/workspaces/new-removed":
			w.WriteHeader(410)
			io.WriteString(w, `{"error":"workspace removed","hint":"Regenerate workspace + token from the canvas → Tokens tab","id":"new-removed","removed_at":"2026-11-21T17:30:34.763994Z"}`)
		case "/workspaces/old-removed":
			io.WriteString(w, `{"id":"old-removed","name":"A","status":"removed","url":"","runtime":"external"}`)
		case "/workspaces/live":
			io.WriteString(w, `{"id":"live","name":"A","status":"online","url":"http://x","runtime":"external"}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"workspace not found"}`)
		}
	})
	c := wireClient(t, ws.URL, nil)
	ctx := context.Background()
	info, err := c.Workspace(ctx, "new-removed")
	if err != nil || !info.Removed || info.Hint == "" || info.RemovedAt.IsZero() || info.ID != "new-removed" {
		t.Fatalf("410 = %+v, %v", info, err)
	}
	info, err = c.Workspace(ctx, "old-removed")
	if err != nil || !info.Removed || info.Name != "A" || len(info.Raw) == 0 {
		t.Fatalf("status removed = %+v, %v", info, err)
	}
	info, err = c.Workspace(ctx, "live")
	if err != nil || info.Removed || info.Status != "online" {
		t.Fatalf("live = %+v, %v", info, err)
	}
	if _, err := c.Workspace(ctx, "gone"); !errors.Is(err, molecule.ErrNotFound) {
		t.Fatalf("missing = %v", err)
	}
	if _, err := c.Workspace(ctx, ""); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("empty id = %v", err)
	}
	for _, r := range ws.requests() {
		if r.Header.Get("Authorization") != "" {
			t.Fatalf("Workspace sent Authorization")
		}
	}
}

func TestProbeInconclusive(t *testing.T) {
	cases := []struct {
		status int
		want   error
	}{
		{500, nil},
		{401, molecule.ErrUnauthorized},
		{204, nil},
		{404, molecule.ErrTenantRouting},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			ws := newWire(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) })
			c := wireClient(t, ws.URL, nil)
			g, err := c.Probe(context.Background())
			if g != molecule.GenerationUnknown || err == nil {
				t.Fatalf("Probe = %v, %v", g, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v; want %v", err, tc.want)
			}
			if q := ws.last(t).Query; q != "limit=1&since_id=00000000-0000-0000-0000-000000000000&type=a2a_receive" {
				t.Fatalf("probe query = %s", q)
			}
		})
	}
}

// recordingHandler is a slog.Handler that keeps records.
type recordingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// text renders every record with its attributes.
func (h *recordingHandler) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.recs {
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		b.WriteByte('\n')
	}
	return b.String()
}

func TestRegisterWarnsOnModeMismatchWithoutSecrets(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, `{"status":"registered","delivery_mode":"push","platform_inbound_secret":"INBOUND-SECRET","auth_token":"MINTED-TOKEN"}`))
	rec := &recordingHandler{}
	c := wireClient(t, ws.URL, func(c *molecule.Config) { c.Logger = slog.New(rec) })
	res, err := c.Register(context.Background(), molecule.RegisterRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeliveryMode != molecule.DeliveryPush || res.PlatformInboundSecret != "INBOUND-SECRET" {
		t.Fatalf("result = %+v", res)
	}
	logs := rec.text()
	if !strings.Contains(logs, "WARN") || !strings.Contains(logs, "answered=push") {
		t.Fatalf("no warning logged:\n%s", logs)
	}
	for _, secret := range []string{"INBOUND-SECRET", "MINTED-TOKEN", wireToken} {
		if strings.Contains(logs, secret) {
			t.Fatalf("log holds a secret:\n%s", logs)
		}
	}
}

func TestRegisterRefusesBadRequests(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, `{}`))
	c := wireClient(t, ws.URL, nil)
	for _, req := range []molecule.RegisterRequest{
		{Mode: "pull"},
		{Mode: molecule.DeliveryPush},
		{Mode: molecule.DeliveryPush, URL: "remote://no-inbound"},
	} {
		if _, err := c.Register(context.Background(), req); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Fatalf("Register(%+v) = %v", req, err)
		}
	}
	// A poll registration drops a URL and defaults the card.
	if _, err := c.Register(context.Background(), molecule.RegisterRequest{URL: "https://ignored.example"}); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(ws.last(t).Body, &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["url"]; ok || body["delivery_mode"] != "poll" || body["id"] != wireWS {
		t.Fatalf("poll body = %v", body)
	}
	if card, _ := body["agent_card"].(map[string]any); card["name"] != wireWS {
		t.Fatalf("default card = %v", body["agent_card"])
	}
	if n := len(ws.requests()); n != 1 {
		t.Fatalf("refused registrations reached the server: %d", n)
	}
}

func TestHeartbeatWireBody(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, `{"status":"ok"}`))
	c := wireClient(t, ws.URL, nil)
	cases := []struct {
		hb   molecule.Heartbeat
		want string
	}{
		{molecule.Heartbeat{}, `{"workspace_id":"` + wireWS + `","active_tasks":0,"current_task":"","uptime_seconds":0,"error_rate":0,"sample_error":"","runtime_metadata":{"capabilities":{"heartbeat":false,"scheduler":false,"session":false,"status_mgmt":false,"retry":false,"activity_decoration":false,"channel_dispatch":false},"relay_version":"dev"}}`},
		{molecule.Heartbeat{ActiveTasks: 2, CurrentTask: "t", UptimeSeconds: 9, ErrorRate: 0.5, SampleError: "e",
			Capabilities: molecule.Capabilities{Heartbeat: true, ChannelDispatch: true}, IdleTimeoutSeconds: 120, RuntimeState: "wedged"},
			`{"workspace_id":"` + wireWS + `","active_tasks":2,"current_task":"t","uptime_seconds":9,"error_rate":0.5,"sample_error":"e","runtime_metadata":{"capabilities":{"heartbeat":true,"scheduler":false,"session":false,"status_mgmt":false,"retry":false,"activity_decoration":false,"channel_dispatch":true},"idle_timeout_seconds":120,"relay_version":"dev"},"runtime_state":"wedged"}`},
		{molecule.Heartbeat{IdleTimeoutSeconds: -3}, `{"workspace_id":"` + wireWS + `","active_tasks":0,"current_task":"","uptime_seconds":0,"error_rate":0,"sample_error":"","runtime_metadata":{"capabilities":{"heartbeat":false,"scheduler":false,"session":false,"status_mgmt":false,"retry":false,"activity_decoration":false,"channel_dispatch":false},"relay_version":"dev"}}`},
	}
	for i, tc := range cases {
		res, err := c.Heartbeat(context.Background(), tc.hb)
		if err != nil || res.Status != "ok" {
			t.Fatalf("case %d: %+v, %v", i, res, err)
		}
		if got := string(ws.last(t).Body); got != tc.want {
			t.Fatalf("case %d body:\n got %s\nwant %s", i, got, tc.want)
		}
	}
}

func TestSendA2AWireBody(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, `{"status":"queued","delivery_mode":"poll","method":"message/send"}`))
	c := wireClient(t, ws.URL, nil)
	res, err := c.SendA2A(context.Background(), molecule.A2AMessage{
		To: "peer-b", Text: "hello", MessageID: "reply-1", InReplyTo: "act-9",
		Metadata:    map[string]any{"relay_hops": 1, "in_reply_to": "overridden"},
		Attachments: []molecule.Attachment{{URI: "workspace:/f.txt", Name: "f.txt", MimeType: "text/plain", Size: 3}},
		Timeout:     1500 * time.Millisecond,
	})
	if err != nil || !res.Queued || res.DeliveryMode != "poll" || res.StatusCode != 200 {
		t.Fatalf("SendA2A = %+v, %v", res, err)
	}
	r := ws.last(t)
	if r.Path != "/workspaces/peer-b/a2a" || r.Header.Get("X-Workspace-Id") != wireWS ||
		r.Header.Get("X-Timeout") != "2" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("request = %s %v", r.Path, r.Header)
	}
	var body struct {
		JSONRPC, ID, Method string
		Params              struct {
			Message struct {
				Role      string
				MessageID string `json:"messageId"`
				Parts     []map[string]any
				Metadata  map[string]any
			}
		}
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	m := body.Params.Message
	if body.JSONRPC != "2.0" || len(body.ID) != 36 || body.Method != "message/send" || m.Role != "agent" || m.MessageID != "reply-1" {
		t.Fatalf("envelope = %s", r.Body)
	}
	if len(m.Parts) != 2 || m.Parts[0]["kind"] != "text" || m.Parts[0]["text"] != "hello" || m.Parts[1]["kind"] != "file" {
		t.Fatalf("parts = %v", m.Parts)
	}
	if f, _ := m.Parts[1]["file"].(map[string]any); f["uri"] != "workspace:/f.txt" || f["mimeType"] != "text/plain" || f["size"] != 3.0 {
		t.Fatalf("file part = %v", m.Parts[1])
	}
	if m.Metadata["in_reply_to"] != "act-9" || m.Metadata["relay_hops"] != 1.0 {
		t.Fatalf("metadata = %v", m.Metadata)
	}
	for _, bad := range []molecule.A2AMessage{
		{To: "p", Text: "x"},
		{Text: "x", MessageID: "m"},
		{To: "p", MessageID: "m"},
		{To: "p", MessageID: "m", Attachments: []molecule.Attachment{{URI: "u"}}},
	} {
		if _, err := c.SendA2A(context.Background(), bad); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Fatalf("SendA2A(%+v) = %v", bad, err)
		}
		if _, err := c.CallPeer(context.Background(), bad); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Fatalf("CallPeer(%+v) = %v", bad, err)
		}
	}
}

func TestNotifyRefusesBadArguments(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, `{"status":"sent"}`))
	c := wireClient(t, ws.URL, nil)
	if _, err := c.Notify(context.Background(), "", nil); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("empty = %v", err)
	}
	if _, err := c.Notify(context.Background(), "x", []molecule.Attachment{{Name: "n"}}); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("bad attachment = %v", err)
	}
	if err := c.UpdateCard(context.Background(), nil); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("nil card = %v", err)
	}
	if _, err := c.Discover(context.Background(), ""); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("empty discover = %v", err)
	}
	if len(ws.requests()) != 0 {
		t.Fatal("refused calls reached the server")
	}
	res, err := c.Notify(context.Background(), "x", []molecule.Attachment{{URI: "u", Name: "n"}})
	if err != nil || res.Status != "sent" {
		t.Fatalf("Notify = %+v, %v", res, err)
	}
	if got := string(ws.last(t).Body); got != `{"attachments":[{"uri":"u","name":"n"}],"message":"x"}` {
		t.Fatalf("body = %s", got)
	}
}

// signalHandler is a slog.Handler that calls fire for each record with msg.
type signalHandler struct {
	msg  string
	fire func()
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.fire()
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

func TestRetryAfterForms(t *testing.T) {
	cases := []struct {
		header   string
		body     string
		min, max time.Duration
	}{
		{time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat), `{}`, 15 * time.Second, 21 * time.Second},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), `{"retry_after":5}`, 0, 0},
		{"soon", `{"retry_after":1.5}`, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"-1", `{}`, 0, 0},
	}
	for _, tc := range cases {
		ws := newWire(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", tc.header)
			w.WriteHeader(429)
			io.WriteString(w, tc.body)
		})
		c := wireClient(t, ws.URL, func(c *molecule.Config) { c.MaxRetries = -1 })
		_, err := c.Notify(context.Background(), "x", nil)
		if d := molecule.RetryAfterOf(err); d < tc.min || d > tc.max || !errors.Is(err, molecule.ErrRateLimited) {
			t.Errorf("Retry-After %q body %s: %v (%v), want %v..%v", tc.header, tc.body, d, err, tc.min, tc.max)
		}
	}
}

func TestCanceledContextIsNotPlatformUnavailable(t *testing.T) {
	ws := newWire(t, jsonAnswer(200, `{}`))
	c := wireClient(t, ws.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.State(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Fatalf("err = %v; want context.Canceled only", err)
	}
	if _, err := c.SendA2A(ctx, molecule.A2AMessage{To: "p", Text: "x", MessageID: "m"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("SendA2A err = %v", err)
	}
	if _, err := c.CallPeer(ctx, molecule.A2AMessage{To: "p", Text: "x", MessageID: "m"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("CallPeer err = %v", err)
	}
}
