package config_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

const (
	wsA  = "35637291-d55e-4553-896c-13c2e02fe4f7"
	wsB  = "b48f61e0-0000-4000-8000-000000000002"
	tokA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)

func load(t *testing.T, args []string, environ ...string) (*config.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fl := config.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	return config.Load(fl, environ)
}

func TestEnvironmentIsReadAndNotShadowedByFlags(t *testing.T) {
	cfg, err := load(t, nil,
		"MOLECULE_PLATFORM_URL=http://127.0.0.1:9/", "MOLECULE_WORKSPACE_ID="+wsA,
		"MOLECULE_WORKSPACE_TOKEN="+tokA, "MOLECULE_POLL_INTERVAL=2s", "MOLECULE_HANDLER=exec:./agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(config.NeedPlatform | config.NeedHandler); err != nil {
		t.Fatal(err)
	}
	if cfg.PollInterval.D() != 2*time.Second || cfg.Handler != "exec:./agent.sh" || cfg.PlatformURL != "http://127.0.0.1:9" {
		t.Fatalf("got %+v", cfg)
	}
	ws := cfg.Workspaces()
	if len(ws) != 1 || ws[0].ID != wsA || ws[0].Token != tokA {
		t.Fatalf("workspaces %v", ws)
	}
	if strings.Contains(ws[0].String(), tokA) {
		t.Fatal("Workspace.String leaks the token")
	}
}

func TestFlagOverridesEnvironment(t *testing.T) {
	cfg, err := load(t, []string{"--poll-interval", "750ms", "--nats-url", "nats://127.0.0.1:4222", "--allow-self"},
		"MOLECULE_POLL_INTERVAL=9s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PollInterval.D() != 750*time.Millisecond || cfg.NATS.URL != "nats://127.0.0.1:4222" || !cfg.AllowSelf {
		t.Fatalf("got poll=%s nats=%q self=%v", cfg.PollInterval, cfg.NATS.URL, cfg.AllowSelf)
	}
}

func TestManyWorkspaces(t *testing.T) {
	cfg, err := load(t, nil, "MOLECULE_PLATFORM_URL=https://x.example", "MOLECULE_WORKSPACE_IDS="+wsA+","+wsB,
		"MOLECULE_WORKSPACE_TOKENS=t1,t2")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(config.NeedPlatform); err != nil {
		t.Fatal(err)
	}
	if ws := cfg.Workspaces(); len(ws) != 2 || ws[1].ID != wsB || ws[1].Token != "t2" {
		t.Fatalf("workspaces %v", ws)
	}
}

func TestValidationNamesTheVariable(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=" + tokA}
	cases := []struct {
		name    string
		environ []string
		want    string
	}{
		{"no platform", []string{"MOLECULE_WORKSPACE_ID=" + wsA}, "MOLECULE_PLATFORM_URL"},
		{"bad platform", []string{"MOLECULE_PLATFORM_URL=ftp://x", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=x"}, "MOLECULE_PLATFORM_URL"},
		{"no workspace", []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9"}, "MOLECULE_WORKSPACE_ID"},
		{"no token", []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA}, "MOLECULE_WORKSPACE_TOKEN"},
		{"bad id", []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=nope", "MOLECULE_WORKSPACE_TOKEN=x"}, "MOLECULE_WORKSPACE_ID"},
		{"unpaired", []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_IDS=" + wsA + "," + wsB, "MOLECULE_WORKSPACE_TOKENS=t1"}, "MOLECULE_WORKSPACE_TOKENS"},
		{"duplicate", []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_IDS=" + wsA + "," + wsA, "MOLECULE_WORKSPACE_TOKENS=t1,t2"}, "configured twice"},
		{"page limit", append(base, "MOLECULE_PAGE_LIMIT=501"), "MOLECULE_PAGE_LIMIT"},
		{"poll interval", append(base, "MOLECULE_POLL_INTERVAL=1ms"), "MOLECULE_POLL_INTERVAL"},
		{"poll interval syntax", append(base, "MOLECULE_POLL_INTERVAL=soon"), "MOLECULE_POLL_INTERVAL"},
		{"concurrency syntax", append(base, "MOLECULE_CONCURRENCY=many"), "MOLECULE_CONCURRENCY"},
		{"log level", append(base, "MOLECULE_LOG_LEVEL=loud"), "MOLECULE_LOG_LEVEL"},
		{"handler", append(base, "MOLECULE_HANDLER= "), "MOLECULE_HANDLER"},
		{"a2a timeout too short", append(base, "MOLECULE_A2A_TIMEOUT=2s"), "MOLECULE_A2A_TIMEOUT"},
		{"a2a timeout over the platform's ceiling", append(base, "MOLECULE_A2A_TIMEOUT=1h"), "MOLECULE_A2A_TIMEOUT"},
		{"history turns negative", append(base, "MOLECULE_HISTORY_TURNS=-1"), "MOLECULE_HISTORY_TURNS"},
		{"history max bytes too small", append(base, "MOLECULE_HISTORY_MAX_BYTES=100"), "MOLECULE_HISTORY_MAX_BYTES"},
		{"history ttl too short", append(base, "MOLECULE_HISTORY_TTL=5s"), "MOLECULE_HISTORY_TTL"},
		{"ask timeout too long for the ask record", append(base, "MOLECULE_ASK_TIMEOUT=2h"), "MOLECULE_ASK_TIMEOUT"},
		{"push listen without url", append(base, "MOLECULE_PUSH_LISTEN=:8081"), "MOLECULE_PUSH_URL"},
		{"push url without listen", append(base, "MOLECULE_PUSH_URL=https://agent.example.com"), "MOLECULE_PUSH_LISTEN"},
		{"push url not http", append(base, "MOLECULE_PUSH_LISTEN=:8081", "MOLECULE_PUSH_URL=remote://no-inbound"), "MOLECULE_PUSH_URL"},
		{"poller group not a key token", append(base, "MOLECULE_POLLER_GROUP=team.a"), "MOLECULE_POLLER_GROUP"},
		{"poller group with push", append(base, "MOLECULE_POLLER_GROUP=fleet", "MOLECULE_PUSH_LISTEN=:8081", "MOLECULE_PUSH_URL=https://agent.example.com"), "MOLECULE_POLLER_GROUP"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, nil, tc.environ...)
			if err == nil {
				err = cfg.Validate(config.NeedPlatform | config.NeedHandler)
			}
			if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want ErrInvalid naming %s", err, tc.want)
			}
			if strings.Contains(err.Error(), tokA) {
				t.Fatal("error leaks the token")
			}
		})
	}
}

func TestTokenFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte(tokA+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	environ := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN_FILE=" + p}
	cfg, err := load(t, nil, environ...)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(config.NeedPlatform); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable token file accepted: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ = load(t, nil, environ...)
	if err := cfg.Validate(config.NeedPlatform); err != nil {
		t.Fatal(err)
	}
	if cfg.WorkspaceToken != tokA {
		t.Fatalf("token %q", cfg.WorkspaceToken)
	}
}

func TestPushIngressSettings(t *testing.T) {
	cfg, err := load(t, []string{"--push-listen", "127.0.0.1:8081"}, "MOLECULE_PLATFORM_URL=http://127.0.0.1:9",
		"MOLECULE_WORKSPACE_ID="+wsA, "MOLECULE_WORKSPACE_TOKEN="+tokA, "MOLECULE_PUSH_URL=https://agent.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(config.NeedPlatform); err != nil {
		t.Fatal(err)
	}
	if cfg.PushListen != "127.0.0.1:8081" || cfg.PushURL != "https://agent.example.com" {
		t.Fatalf("push listen %q, url %q", cfg.PushListen, cfg.PushURL)
	}
}

func TestTopologyMode(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=" + tokA}
	cfg, err := load(t, nil, base...)
	if err != nil || cfg.Topology != "ensure" {
		t.Fatalf("default topology mode %q (%v)", cfg.Topology, err)
	}
	cfg, _ = load(t, []string{"--topology", "lookup"}, base...)
	if err := cfg.Validate(config.NeedPlatform); err != nil || cfg.Topology != "lookup" {
		t.Fatalf("lookup: %q %v", cfg.Topology, err)
	}
	cfg, _ = load(t, nil, append(base, "MOLECULE_TOPOLOGY=create")...)
	if err := cfg.Validate(config.NeedPlatform); err == nil || !strings.Contains(err.Error(), "MOLECULE_TOPOLOGY") {
		t.Fatalf("bad mode accepted: %v", err)
	}
}
