package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// MOLECULE_HANDLER_ENV passes the variables it names and those its
// prefixes match, and none of the relay's secrets even when a prefix
// matches them.
func TestHandlerEnvPassesNamesAndPrefixesButNeverSecrets(t *testing.T) {
	environ := []string{
		"ANTHROPIC_API_KEY=sk-ant-1", "OPENAI_API_KEY=sk-2", "OPENAI_BASE_URL=http://127.0.0.1:11434/v1",
		"VIRTUAL_ENV=/opt/venv", "UNNAMED=x",
		"MOLECULE_WORKSPACE_ID=" + wsA, "MOLECULE_WORKSPACE_TOKEN=" + tokA, "MOLECULE_WORKSPACE_TOKENS=" + tokA,
		"MOLECULE_WORKSPACE_TOKEN_FILE=/run/tok", "MOLECULE_AGENT_TOKEN=cap", "MOLECULE_AGENT_API=http://x",
		"NATS_URL=nats://127.0.0.1:4222", "NATS_PASSWORD=pw", "NATS_TOKEN=nt", "NATS_CREDS=/c", "NATS_NKEY=/n", "NATS_USER=u", "NATS_TLS_KEY=/k",
		"AWS_REGION=eu-west-1", "AWS_SECRET_ACCESS_KEY=aws", "AWS_SESSION_TOKEN=sess", "AWS_ACCESS_KEY_ID=AKIA",
		"MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY, OPENAI_*,VIRTUAL_ENV,MOLECULE_*,NATS_*,AWS_*,",
	}
	cfg, err := load(t, nil, environ...)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ANTHROPIC_API_KEY=sk-ant-1", "OPENAI_API_KEY=sk-2", "OPENAI_BASE_URL=http://127.0.0.1:11434/v1",
		"VIRTUAL_ENV=/opt/venv", "MOLECULE_WORKSPACE_ID=" + wsA, "NATS_URL=nats://127.0.0.1:4222", "AWS_REGION=eu-west-1",
		"MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY, OPENAI_*,VIRTUAL_ENV,MOLECULE_*,NATS_*,AWS_*,"}
	if !slices.Equal(cfg.HandlerEnviron, want) {
		t.Errorf("handler environment\n got %q\nwant %q", cfg.HandlerEnviron, want)
	}
}

// Without MOLECULE_HANDLER_ENV a handler gets nothing beyond its fixed
// variables; a flag names variables as the variable does, and their values
// still come from the environment.
func TestHandlerEnvUnsetPassesNothingAndFlagNamesVariables(t *testing.T) {
	cfg, err := load(t, nil, "ANTHROPIC_API_KEY=sk-ant-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.HandlerEnviron) != 0 {
		t.Errorf("unset MOLECULE_HANDLER_ENV passes %q", cfg.HandlerEnviron)
	}
	cfg, err = load(t, []string{"--handler-env", "ANTHROPIC_*"}, "ANTHROPIC_API_KEY=sk-ant-1", "OPENAI_API_KEY=sk-2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.HandlerEnviron, []string{"ANTHROPIC_API_KEY=sk-ant-1"}) {
		t.Errorf("--handler-env ANTHROPIC_* passes %q", cfg.HandlerEnviron)
	}
}

// Prefixes that match secrets among other variables are accepted (the
// secrets are left out).
func TestHandlerEnvAcceptsPrefixesBroaderThanSecrets(t *testing.T) {
	cfg, err := load(t, nil, "MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY,OPENAI_*,VIRTUAL_ENV,MOLECULE_*,MOLECULE_WORKSPACE_*,NATS_*,AWS_*,PATH")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(0); err != nil {
		t.Fatalf("valid MOLECULE_HANDLER_ENV refused: %v", err)
	}
}

// Naming one of the relay's secrets, or a prefix only secrets match, is
// refused naming MOLECULE_HANDLER_ENV and the entry (the CLI exits 2), as
// is an entry that is no variable name and a bare *.
func TestHandlerEnvRefusesSecretsAndBadEntries(t *testing.T) {
	for entry, want := range map[string]string{
		"MOLECULE_WORKSPACE_TOKEN":         "is a workspace token",
		"MOLECULE_WORKSPACE_TOKENS":        "is a workspace token",
		"MOLECULE_WORKSPACE_TOKEN_FILE":    "is a workspace token",
		"MOLECULE_WORKSPACE_TOKENS_SECRET": "is a workspace token",
		"MOLECULE_WORKSPACE_TOKEN*":        "is a workspace token",
		"MOLECULE_WORKSPACES_JSON":         "the workspaces' tokens",
		"MOLECULE_AGENT_TOKEN":             "set by the relay for each message",
		"NATS_PASSWORD":                    "the relay's NATS credentials",
		"NATS_TOKEN":                       "the relay's NATS credentials",
		"NATS_CREDS":                       "the relay's NATS credentials",
		"NATS_NKEY":                        "the relay's NATS credentials",
		"NATS_TLS_KEY":                     "the relay's NATS credentials",
		"AWS_SECRET_ACCESS_KEY":            "AWS credentials",
		"*":                                "the whole environment",
		"OPENAI-KEY":                       "neither a variable name nor a prefix",
		"OPENAI_*_KEY":                     "neither a variable name nor a prefix",
	} {
		cfg, err := load(t, nil, "MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY,"+entry)
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate(0)
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "MOLECULE_HANDLER_ENV: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want ErrInvalid naming MOLECULE_HANDLER_ENV, saying %q", entry, err, want)
		}
	}
}
