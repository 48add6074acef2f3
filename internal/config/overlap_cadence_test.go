package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// The overlap cadence is configurable: the slow re-read and the quick
// follow-ups after activity (0 turns them off).
func TestOverlapCadenceIsConfigurable(t *testing.T) {
	base := []string{"MOLECULE_PLATFORM_URL=http://127.0.0.1:1", "MOLECULE_WORKSPACE_ID=6f1c2a8e-3b1d-4c6e-9a7f-1d2e3f4a5b6c", "MOLECULE_WORKSPACE_TOKEN=t"}
	for _, tc := range []struct {
		env       []string
		every     time.Duration
		followUps []time.Duration
		bad       string
	}{
		{nil, 30 * time.Second, []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}, ""},
		{[]string{"MOLECULE_OVERLAP_EVERY=10s", "MOLECULE_OVERLAP_FOLLOW_UPS=500ms,2s"}, 10 * time.Second, []time.Duration{500 * time.Millisecond, 2 * time.Second}, ""},
		{[]string{"MOLECULE_OVERLAP_FOLLOW_UPS=0"}, 30 * time.Second, []time.Duration{0}, ""},
		{[]string{"MOLECULE_OVERLAP_EVERY=3m"}, 0, nil, "MOLECULE_OVERLAP_EVERY"},
	} {
		cfg, err := config.Load(nil, append(append([]string{}, base...), tc.env...))
		if err == nil {
			err = cfg.Validate(config.NeedPlatform)
		}
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if cfg.OverlapEvery.D() != tc.every {
			t.Errorf("%v: every %s, want %s", tc.env, cfg.OverlapEvery, tc.every)
		}
		got := config.Durations(cfg.OverlapFollowUps)
		if len(got) != len(tc.followUps) {
			t.Fatalf("%v: follow-ups %v, want %v", tc.env, got, tc.followUps)
		}
		for i := range got {
			if got[i] != tc.followUps[i] {
				t.Errorf("%v: follow-ups %v, want %v", tc.env, got, tc.followUps)
			}
		}
	}
}
