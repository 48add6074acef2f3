package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// MOLECULE_STOP_GRACE defaults below Kubernetes' 30 s and MOLECULE_SINGLETON
// to warn; a value out of range is refused naming its variable.
func TestStopGraceAndSingletonSettings(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:1", "MOLECULE_WORKSPACE_ID=6f1c2a8e-3b1d-4c6e-9a7f-1d2e3f4a5b6c", "MOLECULE_WORKSPACE_TOKEN=t"}
	load := func(env ...string) (*config.Config, error) {
		cfg, err := config.Load(nil, append(append([]string{}, base...), env...))
		if err == nil {
			err = cfg.Validate(config.NeedPlatform)
		}
		return cfg, err
	}
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StopGrace.D() != 25*time.Second || cfg.Singleton != "warn" {
		t.Fatalf("defaults: grace %s, singleton %q; want 25s, warn", cfg.StopGrace, cfg.Singleton)
	}
	if cfg, err := load("MOLECULE_STOP_GRACE=10s", "MOLECULE_SINGLETON=refuse"); err != nil || cfg.StopGrace.D() != 10*time.Second || cfg.Singleton != "refuse" {
		t.Fatalf("10 s, refuse: %v %+v", err, cfg)
	}
	for _, bad := range [][2]string{{"MOLECULE_STOP_GRACE", "500ms"}, {"MOLECULE_STOP_GRACE", "2h"}, {"MOLECULE_SINGLETON", "maybe"}} {
		if _, err := load(bad[0] + "=" + bad[1]); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v, want one naming the variable", bad[0], bad[1], err)
		}
	}
}
