package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// The TypeScript channel's settings (enteros-mcp-claude-channel 4255a28
// server.ts:72-140) are read as it defines them, each standing for the
// relay's own. Before, every one of them was ignored with a warning.
func TestTypeScriptChannelSettingsStandForTheRelays(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=" + tokA}
	for _, tc := range []struct {
		env   string
		check func(*config.Config) bool
	}{
		{"MOLECULE_POLL_INTERVAL_MS=750", func(c *config.Config) bool { return c.PollInterval.D() == 750*time.Millisecond }},
		{"MOLECULE_POLL_WINDOW_SECS=30", func(c *config.Config) bool { return c.BacklogWindow.D() == 30*time.Second }},
		{"MOLECULE_HEARTBEAT_INTERVAL_MS=10000", func(c *config.Config) bool { return c.HeartbeatInterval.D() == 10*time.Second }},
		{"MOLECULE_HEARTBEAT_INTERVAL_MS=0", func(c *config.Config) bool { return c.HeartbeatInterval.D() == 0 }},
		{"MOLECULE_HEARTBEAT_INTERVAL_MS=-5", func(c *config.Config) bool { return c.HeartbeatInterval.D() == 0 }}, // clamped, as there
		{"MOLECULE_AUTO_REGISTER_POLL=No", func(c *config.Config) bool { return !c.Register }},
		{"MOLECULE_AUTO_REGISTER_POLL=0", func(c *config.Config) bool { return !c.Register }},
		{"MOLECULE_AUTO_REGISTER_POLL=yes", func(c *config.Config) bool { return c.Register }},
	} {
		cfg, err := load(t, nil, append(base, tc.env)...)
		if err == nil {
			err = cfg.Validate(config.NeedPlatform)
		}
		if err != nil || !tc.check(cfg) {
			t.Errorf("%s: err %v, config %+v", tc.env, err, cfg)
		}
	}
}

// Both names of one setting may be set only when they agree: a
// disagreement exits 2 (a usage error) naming both, rather than one of
// them silently winning.
func TestBothNamesOfASettingMustAgree(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=" + tokA}
	if _, err := load(t, nil, append(base, "MOLECULE_POLL_INTERVAL=5s", "MOLECULE_POLL_INTERVAL_MS=5000")...); err != nil {
		t.Errorf("agreeing names refused: %v", err)
	}
	_, err := load(t, nil, append(base, "MOLECULE_POLL_INTERVAL=2s", "MOLECULE_POLL_INTERVAL_MS=750")...)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_POLL_INTERVAL_MS") || !strings.Contains(err.Error(), "MOLECULE_POLL_INTERVAL=") {
		t.Errorf("disagreeing names: %v", err)
	}
	_, err = load(t, []string{"--register=true"}, append(base, "MOLECULE_AUTO_REGISTER_POLL=false")...)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_REGISTER") {
		t.Errorf("a flag disagreeing with the channel's name: %v", err)
	}
	if _, err = load(t, nil, append(base, "MOLECULE_POLL_INTERVAL_MS=soon")...); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_POLL_INTERVAL_MS") {
		t.Errorf("a value that is not a number: %v", err)
	}
}

// MOLECULE_WORKSPACES_JSON in its canonical form and with the channel's
// aliases (targets.ts parseWorkspaceTargets): each entry on its own
// platform, which the relay's lists pair by position.
func TestWorkspacesJSONNamesTheWorkspacesEachOnItsPlatform(t *testing.T) {
	js := `[{"id":"` + wsA + `","token":"` + tokA + `","platform_url":"https://a.example/"},` +
		`{"workspace_id":"` + wsB + `","workspace_token":"tok-b","platformUrl":"https://b.example"}]`
	cfg, err := load(t, nil, "MOLECULE_WORKSPACES_JSON="+js)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil {
		t.Fatal(err)
	}
	ws := cfg.Workspaces()
	if len(ws) != 2 || ws[0].ID != wsA || ws[0].Token != tokA || ws[0].PlatformURL != "https://a.example" ||
		ws[1].ID != wsB || ws[1].Token != "tok-b" || ws[1].PlatformURL != "https://b.example" {
		t.Fatalf("workspaces %+v", ws)
	}

	// The common single-platform case: entries without platform_url are on
	// MOLECULE_PLATFORM_URL; MOLECULE_WORKSPACE_ID naming one of them is
	// the same workspace, not a second one.
	cfg, err = load(t, nil, "MOLECULE_PLATFORM_URL=https://one.example", "MOLECULE_WORKSPACE_ID="+wsA,
		`MOLECULE_WORKSPACES_JSON=[{"id":"`+wsA+`","token":"`+tokA+`"}]`)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil || len(cfg.Workspaces()) != 1 || cfg.Workspaces()[0].PlatformURL != "https://one.example" {
		t.Fatalf("single platform: %v %+v", err, cfg)
	}

	for name, environ := range map[string][]string{
		"not JSON":             {"MOLECULE_WORKSPACES_JSON=[{id:1}]"},
		"no token":             {`MOLECULE_WORKSPACES_JSON=[{"id":"` + wsA + `","platform_url":"https://a.example"}]`},
		"no platform":          {`MOLECULE_WORKSPACES_JSON=[{"id":"` + wsA + `","token":"t"}]`},
		"other lists disagree": {"MOLECULE_WORKSPACE_IDS=" + wsB, "MOLECULE_WORKSPACE_TOKENS=t", "MOLECULE_WORKSPACES_JSON=" + js},
		"another single id":    {"MOLECULE_WORKSPACE_ID=" + wsB, "MOLECULE_WORKSPACE_TOKEN=t", `MOLECULE_WORKSPACES_JSON=[{"id":"` + wsA + `","token":"t","platform_url":"https://a.example"}]`},
	} {
		_, err := load(t, nil, environ...)
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_WORKSPACES_JSON") {
			t.Errorf("%s: %v", name, err)
		}
		if err != nil && strings.Contains(err.Error(), tokA) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}

// A relay's first start delivers the messages queued before it, within a
// bound the README names: 72 hours and the newest 100.
func TestColdStartBacklogIsOnByDefault(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BacklogWindow.D() != 72*time.Hour || cfg.BacklogLimit != 100 || cfg.HeartbeatInterval.D() != 30*time.Second {
		t.Fatalf("backlog window %s, limit %d, heartbeat %s", cfg.BacklogWindow, cfg.BacklogLimit, cfg.HeartbeatInterval)
	}
}
