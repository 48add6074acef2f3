package config_test

import (
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// Ids and tokens pasted into each other's variables (a swapped pair of
// comma lists, or a token in MOLECULE_WORKSPACE_ID) are refused, but the
// error must not print the token: errors reach CI logs.
func TestSwappedIDAndTokenErrorDoesNotLeakToken(t *testing.T) {
	const tokB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	cases := map[string][]string{
		"single": {"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_ID=" + tokA, "MOLECULE_WORKSPACE_TOKEN=" + wsA},
		"many": {"MOLECULE_PLATFORM_URL=http://127.0.0.1:9", "MOLECULE_WORKSPACE_IDS=" + tokA + "," + tokB,
			"MOLECULE_WORKSPACE_TOKENS=" + wsA + "," + wsB},
	}
	for name, environ := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := load(t, nil, environ...)
			if err == nil {
				err = cfg.Validate(config.NeedPlatform)
			}
			if err == nil {
				t.Fatal("swapped id and token accepted")
			}
			if strings.Contains(err.Error(), tokA) || strings.Contains(err.Error(), tokB) {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}
}
