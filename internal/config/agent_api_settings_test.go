package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// TestAgentAPISettings: the agent API and structured-answer variables
// default to a loopback API without secrets and text answers; flags
// mirror them; a non-loopback address or an unknown answer form is an
// error naming the variable.
func TestAgentAPISettings(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=" + tokA}
	cfg, err := load(t, nil, base...)
	if err != nil || cfg.Validate(config.NeedPlatform|config.NeedHandler) != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.AgentAPIListen != "127.0.0.1:0" || cfg.AgentAPISecrets || cfg.HandlerAnswer != "text" || cfg.Settings.Off() {
		t.Errorf("defaults: listen %q, secrets %v, answer %q", cfg.AgentAPIListen, cfg.AgentAPISecrets, cfg.HandlerAnswer)
	}
	cfg, err = load(t, []string{"--agent-api-secrets", "--handler-answer=json", "--agent-api-listen=off"}, base...)
	if err != nil || cfg.Validate(config.NeedPlatform|config.NeedHandler) != nil || !cfg.AgentAPISecrets || cfg.HandlerAnswer != "json" || !cfg.Settings.Off() {
		t.Errorf("flags: %+v, %v", cfg, err)
	}
	for env, want := range map[string]string{
		"MOLECULE_AGENT_API_LISTEN=0.0.0.0:7000": "MOLECULE_AGENT_API_LISTEN",
		"MOLECULE_AGENT_API_LISTEN=:7000":        "MOLECULE_AGENT_API_LISTEN",
		"MOLECULE_HANDLER_ANSWER=xml":            "MOLECULE_HANDLER_ANSWER",
	} {
		cfg, err := load(t, nil, append(base, env)...)
		if err == nil {
			err = cfg.Validate(config.NeedPlatform | config.NeedHandler)
		}
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", env, err, want)
		}
	}
}
