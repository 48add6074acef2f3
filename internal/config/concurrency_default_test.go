package config_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// The stages' default concurrency is written once, in internal/stage: the
// configuration takes it from there, a variable or flag overrides it, and
// the flag's usage still names it.
func TestConcurrencyDefaultsAreTheStagesDefault(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Concurrency != stage.DefaultConcurrency || cfg.ReplyConcurrency != stage.DefaultConcurrency {
		t.Errorf("Concurrency %d, ReplyConcurrency %d, want %d", cfg.Concurrency, cfg.ReplyConcurrency, stage.DefaultConcurrency)
	}
	cfg, err = load(t, []string{"--reply-concurrency", "3"}, "MOLECULE_CONCURRENCY=5")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Concurrency != 5 || cfg.ReplyConcurrency != 3 {
		t.Errorf("Concurrency %d, ReplyConcurrency %d, want 5 and 3", cfg.Concurrency, cfg.ReplyConcurrency)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	config.BindFlags(fs)
	if u := fs.Lookup("concurrency").Usage; !strings.Contains(u, "(default 16)") {
		t.Errorf("usage %q does not name the default", u)
	}
}
