package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// Moving from the TypeScript channel (issue 41): its .env names the
// workspace as MOLECULE_WORKSPACE_IDS/_TOKENS, and the same workspace is
// exported as MOLECULE_WORKSPACE_ID. The environment wins, as the README
// says, under whichever name each gives a setting, instead of the
// workspace being "configured twice" (exit 2); one line says what the
// .env gave that was not taken.
func TestEnvironmentWinsOverDotEnvUnderEitherName(t *testing.T) {
	const ws, tok = "6f1c2b1e-4a57-4c47-9a3e-3c1f2d9b8a01", "tok-env"
	home := t.TempDir()
	state := filepath.Join(home, ".claude", "channels", "molecule")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	dotenv := "MOLECULE_PLATFORM_URL=https://from-dotenv.example\nMOLECULE_WORKSPACE_IDS=" + ws + "\nMOLECULE_WORKSPACE_TOKENS=tok-dotenv\nMOLECULE_POLL_INTERVAL_MS=750\n"
	if err := os.WriteFile(filepath.Join(state, ".env"), []byte(dotenv), 0o600); err != nil {
		t.Fatal(err)
	}
	environ, note := mcpEnviron([]string{"HOME=" + home, "MOLECULE_WORKSPACE_ID=" + ws, "MOLECULE_WORKSPACE_TOKEN=" + tok, "MOLECULE_POLL_INTERVAL=2s"})
	cfg, err := config.Load(nil, environ)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil {
		t.Fatalf("the .env plus the exported workspace: %v", err)
	}
	if w := cfg.Workspaces(); len(w) != 1 || w[0].ID != ws || w[0].Token != tok || w[0].PlatformURL != "https://from-dotenv.example" {
		t.Errorf("workspaces %+v; want %s with the environment's token on the .env's platform", w, ws)
	}
	if cfg.PollInterval.D() != 2*time.Second {
		t.Errorf("poll interval %s; want the environment's 2s", cfg.PollInterval)
	}
	for _, want := range []string{"MOLECULE_WORKSPACE_IDS (the environment's MOLECULE_WORKSPACE_ID)", "MOLECULE_WORKSPACE_TOKENS", "MOLECULE_POLL_INTERVAL_MS (the environment's MOLECULE_POLL_INTERVAL)", filepath.Join(state, ".env")} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q does not say %q", note, want)
		}
	}
	if strings.Contains(note, "tok-") || strings.Contains(note, "\n") {
		t.Errorf("note %q: one line, no token", note)
	}
}
