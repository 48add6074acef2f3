package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	_ "github.com/molecule-ai/molecule-relay/internal/relay/embedded"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// recorder is a slog.Handler that keeps every record and signals each
// message on a channel, so a test can wait for a log event.
type recorder struct {
	mu     sync.Mutex
	lines  []string
	events chan string
}

func newRecorder() *recorder { return &recorder{events: make(chan string, 1024)} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	select {
	case r.events <- rec.Message:
	default:
	}
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

func (r *recorder) waitFor(t *testing.T, msg string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case m := <-r.events:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("no %q log event within %s; log:\n%s", msg, within, r.all())
		}
	}
}

func connect(t *testing.T, cfg broker.Config, log *slog.Logger) *broker.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := broker.Connect(ctx, cfg, log)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestEmbeddedDataSurvivesRestart(t *testing.T) {
	store := filepath.Join(t.TempDir(), "nats")
	cfg := broker.Config{StoreDir: store}
	ctx := context.Background()

	c := connect(t, cfg, nil)
	if !c.Embedded() || c.Server == nil {
		t.Fatalf("want an embedded server, got Server=%v", c.Server)
	}
	if !strings.HasPrefix(c.URL(), "nats://127.0.0.1:") {
		t.Fatalf("URL = %q, want nats://127.0.0.1:<port>", c.URL())
	}
	if ip := c.Server.(interface{ Addr() net.Addr }).Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("embedded server listens on %s, want loopback only", ip)
	}
	if err := c.Healthy(ctx, time.Second); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
	// Another client can use URL().
	other, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatalf("second client on %s: %v", c.URL(), err)
	}
	other.Close()

	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := c.JS.Publish(ctx, "keep.one", []byte("survives")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	srv := c.Server.(interface{ Running() bool })
	c.Close()
	if srv.Running() {
		t.Fatal("embedded server still running after Close")
	}
	if !c.NC.IsClosed() {
		t.Fatal("connection not closed after Close")
	}
	c.Close() // idempotent

	c2 := connect(t, cfg, nil)
	s, err := c2.JS.Stream(ctx, "KEEP")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("get msg after restart: %v", err)
	}
	if string(m.Data) != "survives" || m.Subject != "keep.one" {
		t.Fatalf("after restart got %q on %q", m.Data, m.Subject)
	}
}

// nats-server takes no lock on its store, and two servers writing one
// file store corrupt it: the second process (here a second server of the
// same process, which flock refuses alike) is refused with a message
// naming the store, and the store is free again once the first stops.
func TestEmbeddedStoreUsedByOneServerAtATime(t *testing.T) {
	cfg := broker.Config{StoreDir: filepath.Join(t.TempDir(), "nats"), ConnectTimeout: time.Second}
	first := connect(t, cfg, nil)
	_, err := broker.Connect(context.Background(), cfg, nil)
	if !errors.Is(err, broker.ErrEmbedded) || !errors.Is(err, broker.ErrStoreLocked) || !strings.Contains(err.Error(), "is in use by another process") ||
		!strings.Contains(err.Error(), cfg.StoreDir) {
		t.Fatalf("second server on one store: err = %v, want ErrEmbedded naming the store in use", err)
	}
	first.Close()
	again := connect(t, cfg, nil)
	if !again.Embedded() {
		t.Fatal("store not free after the first server stopped")
	}
}

func TestEmbeddedFixedPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := broker.Connect(ctx, broker.Config{StoreDir: t.TempDir(), EmbeddedPort: port, ConnectTimeout: 200 * time.Millisecond}, nil)
	if err == nil {
		c.Close()
		t.Fatal("Connect succeeded on a port already in use")
	}
	if !errors.Is(err, broker.ErrEmbedded) || !strings.Contains(err.Error(), "NATS_EMBEDDED_PORT "+strconv.Itoa(port)) {
		t.Fatalf("err = %v, want ErrEmbedded naming NATS_EMBEDDED_PORT %d", err, port)
	}
	t.Logf("port in use: %v", err)
}

func TestExternalReconnectsAndLogs(t *testing.T) {
	ns := natstest.Start(t)
	rec := newRecorder()
	// Credentials in the URL must never reach the log. The server has no
	// auth, so it ignores them.
	url := "nats://alice:hunter2@127.0.0.1:" + strconv.Itoa(ns.Port)
	c := connect(t, broker.Config{URL: url, ConnectTimeout: 2 * time.Second}, slog.New(rec))
	if c.Embedded() || c.Server != nil {
		t.Fatal("external connection reports an embedded server")
	}
	if want := "nats://redacted@127.0.0.1:" + strconv.Itoa(ns.Port); c.URL() != want {
		t.Fatalf("URL() = %q, want the configured URL without its credentials, %q", c.URL(), want)
	}
	ctx := context.Background()
	if err := c.Healthy(ctx, time.Second); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
	if _, err := c.JS.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream on external server: %v", err)
	}

	ns.Stop()
	rec.waitFor(t, "nats disconnected", 5*time.Second)
	if err := c.Healthy(ctx, 200*time.Millisecond); !errors.Is(err, broker.ErrUnhealthy) {
		t.Fatalf("Healthy with the server down = %v, want ErrUnhealthy", err)
	}
	ns.Restart(t)
	rec.waitFor(t, "nats reconnected", 10*time.Second)
	if err := c.Healthy(ctx, time.Second); err != nil {
		t.Fatalf("Healthy after reconnect: %v", err)
	}
	if logs := rec.all(); strings.Contains(logs, "hunter2") || strings.Contains(logs, "alice") {
		t.Fatalf("credentials leaked into the log:\n%s", logs)
	}
	c.Close()
	if err := c.Healthy(ctx, time.Second); !errors.Is(err, broker.ErrUnhealthy) {
		t.Fatalf("Healthy after Close = %v, want ErrUnhealthy", err)
	}
}

func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestDeadURLFailsAfterTimeout(t *testing.T) {
	port := closedPort(t)
	url := "nats://bob:s3cr3t@127.0.0.1:" + strconv.Itoa(port)
	timeout := 300 * time.Millisecond
	start := time.Now()
	c, err := broker.Connect(context.Background(), broker.Config{URL: url, ConnectTimeout: timeout}, nil)
	elapsed := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Connect to a closed port succeeded")
	}
	if !errors.Is(err, broker.ErrConnect) {
		t.Fatalf("err = %v, want ErrConnect", err)
	}
	if elapsed > 3*time.Second {
		t.Fatalf("Connect took %s with a %s timeout", elapsed, timeout)
	}
	msg := err.Error()
	if !strings.Contains(msg, "127.0.0.1:"+strconv.Itoa(port)) || !strings.Contains(msg, "NATS_URL") {
		t.Fatalf("error does not say which URL and what to check: %s", msg)
	}
	if strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "bob") {
		t.Fatalf("error leaks credentials: %s", msg)
	}
	t.Logf("dead URL refused after %s: %v", elapsed, err)
}

func TestConnectHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := broker.Connect(ctx, broker.Config{URL: "nats://127.0.0.1:" + strconv.Itoa(closedPort(t)), ConnectTimeout: time.Minute}, nil)
	if !errors.Is(err, broker.ErrConnect) {
		t.Fatalf("err = %v, want ErrConnect", err)
	}
}

// startAuthServer starts a plain nats-server configured through
// server.Options, with whatever authentication opts sets.
func startAuthServer(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("auth server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

func TestAuthentication(t *testing.T) {
	userURL := startAuthServer(t, &server.Options{Username: "relay", Password: "pa55"})
	tokenURL := startAuthServer(t, &server.Options{Authorization: "t0ken"})

	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()
	strangerFile := filepath.Join(t.TempDir(), "stranger.nk")
	if err := os.WriteFile(strangerFile, strangerSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	nkeyURL := startAuthServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})

	tests := []struct {
		name string
		cfg  broker.Config
		ok   bool
	}{
		{"user+password", broker.Config{URL: userURL, User: "relay", Password: "pa55"}, true},
		{"wrong password", broker.Config{URL: userURL, User: "relay", Password: "nope"}, false},
		{"no credentials", broker.Config{URL: userURL}, false},
		{"token", broker.Config{URL: tokenURL, Token: "t0ken"}, true},
		{"wrong token", broker.Config{URL: tokenURL, Token: "wrong"}, false},
		{"nkey", broker.Config{URL: nkeyURL, NKeySeedFile: seedFile}, true},
		{"unknown nkey", broker.Config{URL: nkeyURL, NKeySeedFile: strangerFile}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A long timeout: an authorization failure must not be retried
			// until it runs out.
			tt.cfg.ConnectTimeout = 10 * time.Second
			start := time.Now()
			c, err := broker.Connect(context.Background(), tt.cfg, nil)
			if tt.ok {
				if err != nil {
					t.Fatalf("Connect: %v", err)
				}
				defer c.Close()
				if err := c.Healthy(context.Background(), time.Second); err != nil {
					t.Fatalf("Healthy: %v", err)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("Connect succeeded with bad credentials")
			}
			if !errors.Is(err, broker.ErrConnect) || !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("err = %v, want ErrConnect wrapping nats.ErrAuthorization", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("authorization failure took %s: it was retried", d)
			}
			for _, secret := range []string{"pa55", "nope", "t0ken", "wrong"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error leaks a secret: %v", err)
				}
			}
		})
	}
}

func TestNKeyFileNotASeed(t *testing.T) {
	f := filepath.Join(t.TempDir(), "garbage.nk")
	if err := os.WriteFile(f, []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := broker.Connect(context.Background(), broker.Config{URL: "nats://127.0.0.1:1", NKeySeedFile: f}, nil)
	var ce *broker.ConfigError
	if !errors.As(err, &ce) || ce.Var != "NATS_NKEY" {
		t.Fatalf("err = %v, want a ConfigError on NATS_NKEY", err)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "present")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	const url = "nats://127.0.0.1:4222"
	tests := []struct {
		name    string
		cfg     broker.Config
		wantVar string // "" = valid
		want    string // substring of the message
	}{
		{"embedded defaults", broker.Config{}, "", ""},
		{"external plain", broker.Config{URL: url}, "", ""},
		{"external list", broker.Config{URL: url + ", tls://h2:4222,wss://h3"}, "", ""},
		{"host:port", broker.Config{URL: "127.0.0.1:4222"}, "", ""},
		{"creds readable", broker.Config{URL: url, CredsFile: file}, "", ""},
		{"mutual tls", broker.Config{URL: url, TLSCAFile: file, TLSCertFile: file, TLSKeyFile: file}, "", ""},
		{"user only", broker.Config{URL: url, User: "u"}, "", ""},
		{"creds missing", broker.Config{URL: url, CredsFile: missing}, "NATS_CREDS", `file "` + missing + `" not readable`},
		{"creds is a dir", broker.Config{URL: url, CredsFile: dir}, "NATS_CREDS", "directory"},
		{"nkey missing", broker.Config{URL: url, NKeySeedFile: missing}, "NATS_NKEY", "not readable"},
		{"ca missing", broker.Config{URL: url, TLSCAFile: missing}, "NATS_TLS_CA", "not readable"},
		{"creds and nkey", broker.Config{URL: url, CredsFile: file, NKeySeedFile: file}, "NATS_NKEY", "NATS_CREDS"},
		{"creds and user", broker.Config{URL: url, CredsFile: file, User: "u"}, "NATS_CREDS", "NATS_USER"},
		{"token and user", broker.Config{URL: url, Token: "t", User: "u"}, "NATS_TOKEN", "NATS_USER"},
		{"password alone", broker.Config{URL: url, Password: "p"}, "NATS_PASSWORD", "without NATS_USER"},
		{"cert without key", broker.Config{URL: url, TLSCertFile: file}, "NATS_TLS_KEY", "NATS_TLS_CERT"},
		{"key without cert", broker.Config{URL: url, TLSKeyFile: file}, "NATS_TLS_CERT", "NATS_TLS_KEY"},
		{"http scheme", broker.Config{URL: "http://x:4222"}, "NATS_URL", "scheme"},
		{"bad URL redacted", broker.Config{URL: "nats://u:sekret@h:4222,http://u:sekret@h"}, "NATS_URL", "redacted"},
		{"empty item", broker.Config{URL: url + ",,"}, "NATS_URL", "empty"},
		{"creds without URL", broker.Config{CredsFile: file}, "NATS_CREDS", "NATS_URL is empty"},
		{"token without URL", broker.Config{Token: "t"}, "NATS_TOKEN", "NATS_URL is empty"},
		{"negative timeout", broker.Config{ConnectTimeout: -time.Second}, "NATS_CONNECT_TIMEOUT", "positive"},
		{"port too big", broker.Config{EmbeddedPort: 70000}, "NATS_EMBEDDED_PORT", "70000"},
		{"port too small", broker.Config{EmbeddedPort: -2}, "NATS_EMBEDDED_PORT", "-2"},
		{"sync always", broker.Config{SyncInterval: "always"}, "", ""},
		{"sync interval", broker.Config{SyncInterval: "2m"}, "", ""},
		{"sync neither", broker.Config{SyncInterval: "sometimes"}, "NATS_SYNC_INTERVAL", `"sometimes" is neither "always" nor a positive duration`},
		{"sync zero", broker.Config{SyncInterval: "0s"}, "NATS_SYNC_INTERVAL", "positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.SetDefaults()
			err := cfg.Validate()
			if tt.wantVar == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ce *broker.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want a *ConfigError", err)
			}
			if ce.Var != tt.wantVar || !errors.Is(err, broker.ErrInvalidConfig) {
				t.Fatalf("Validate = %v (var %s), want var %s", err, ce.Var, tt.wantVar)
			}
			if !strings.HasPrefix(err.Error(), tt.wantVar+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %q, want %q prefix and %q in it", err, tt.wantVar+": ", tt.want)
			}
			if strings.Contains(err.Error(), "sekret") {
				t.Fatalf("error leaks a password: %v", err)
			}
		})
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	var cfg broker.Config
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	cfg.SetDefaults()
	if cfg.URL != "" || cfg.StoreDir != broker.DefaultStoreDir || cfg.EmbeddedPort != -1 ||
		cfg.ConnectTimeout != 5*time.Second || cfg.ClientName != broker.DefaultClientName || cfg.SyncInterval != broker.SyncAlways {
		t.Fatalf("defaults from tags: %+v", cfg)
	}
	environ := map[string]string{
		"NATS_URL": "nats://n1:4222", "NATS_CREDS": "/c", "NATS_NKEY": "/n", "NATS_USER": "u",
		"NATS_PASSWORD": "p", "NATS_TOKEN": "t", "NATS_TLS_CA": "/ca", "NATS_TLS_CERT": "/cert",
		"NATS_TLS_KEY": "/key", "NATS_STORE_DIR": "/s", "NATS_EMBEDDED_PORT": "4333",
		"NATS_CONNECT_TIMEOUT": "750ms", "NATS_NAME": "worker-1", "NATS_SYNC_INTERVAL": "10s",
	}
	cfg = broker.Config{}
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		t.Fatal(err)
	}
	want := broker.Config{URL: "nats://n1:4222", CredsFile: "/c", NKeySeedFile: "/n", User: "u", Password: "p",
		Token: "t", TLSCAFile: "/ca", TLSCertFile: "/cert", TLSKeyFile: "/key", StoreDir: "/s", EmbeddedPort: 4333,
		ConnectTimeout: 750 * time.Millisecond, ClientName: "worker-1", SyncInterval: "10s"}
	if cfg != want {
		t.Fatalf("parsed %+v\nwant   %+v", cfg, want)
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://alice:secret@h:4222", "nats://redacted@h:4222"},
		{"nats://token@h:4222", "nats://redacted@h:4222"},
		{"alice:secret@h:4222", "redacted@h:4222"},
		{"nats://a:b@h1:4222, tls://h2:4222,wss://c:d@h3/path@x", "nats://redacted@h1:4222,tls://h2:4222,wss://redacted@h3/path@x"},
		{"nats://a:p@ss@h:4222", "nats://redacted@h:4222"},
	}
	for _, tt := range tests {
		if got := broker.RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
