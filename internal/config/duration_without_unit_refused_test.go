package config_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// A duration without a unit is refused with both readings it could have
// (issue 41: MOLECULE_POLL_INTERVAL=5000 was taken as 5,000 s), as a
// variable and as a flag; 0 needs none, and the TypeScript channel's
// _MS variable is read in milliseconds, as its name says.
func TestDurationWithoutUnitIsRefusedWithTheHint(t *testing.T) {
	for _, env := range []string{"MOLECULE_POLL_INTERVAL=5000", "MOLECULE_STOP_GRACE=10", "MOLECULE_OVERLAP_FOLLOW_UPS=250ms,0.5"} {
		_, err := config.Load(nil, []string{env})
		name, v, _ := strings.Cut(env, "=")
		if i := strings.LastIndex(v, ","); i >= 0 {
			v = v[i+1:]
		}
		want := `"` + v + `" has no unit; write ` + v + `ms or ` + v + `s`
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming %s and saying %s", env, err, name, want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fl := config.BindFlags(fs)
	if err := fs.Parse([]string{"--poll-interval", "5000"}); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(fl, nil); err == nil || !strings.Contains(err.Error(), "--poll-interval") {
		t.Errorf("--poll-interval 5000: %v; want refused", err)
	}
	for env, want := range map[string]time.Duration{
		"MOLECULE_POLL_INTERVAL=500ms":   500 * time.Millisecond,
		"MOLECULE_POLL_INTERVAL_MS=5000": 5 * time.Second,
		"MOLECULE_HEARTBEAT_INTERVAL=0":  0,
		"MOLECULE_POLL_INTERVAL=1m30s":   90 * time.Second,
	} {
		cfg, err := config.Load(nil, []string{env})
		if err != nil {
			t.Errorf("%s: %v", env, err)
			continue
		}
		got := cfg.PollInterval.D()
		if strings.HasPrefix(env, "MOLECULE_HEARTBEAT") {
			got = cfg.HeartbeatInterval.D()
		}
		if got != want {
			t.Errorf("%s: %s, want %s", env, got, want)
		}
	}
}
