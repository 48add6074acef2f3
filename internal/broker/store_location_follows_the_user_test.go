package broker_test

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/broker"
)

// The default store is one per relay (platform host and workspace set) in
// the user's state directory, whatever the working directory and the
// order the workspaces are listed in.
func TestStoreLocationFollowsTheUser(t *testing.T) {
	t.Chdir(t.TempDir())
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	home, state := t.TempDir(), t.TempDir()
	ab, from := broker.StoreLocation(env("HOME", home), "https://acme.moleculesai.app", []string{"ws-a", "ws-b"})
	ba, _ := broker.StoreLocation(env("HOME", home), "https://acme.moleculesai.app", []string{"ws-b", "ws-a"})
	a, _ := broker.StoreLocation(env("HOME", home), "https://acme.moleculesai.app", []string{"ws-a"})
	other, _ := broker.StoreLocation(env("HOME", home), "https://other.example:8443", []string{"ws-a", "ws-b"})
	if from != broker.StoreFromStateDir || filepath.Base(ab) != "nats" || !strings.HasPrefix(ab, home) {
		t.Fatalf("default store %q (%s), want one under %s", ab, from, home)
	}
	if runtime.GOOS == "linux" && !strings.HasPrefix(ab, filepath.Join(home, ".local", "state", "molecule-relay")) {
		t.Errorf("Linux store %q is not in ~/.local/state/molecule-relay", ab)
	}
	if ab != ba {
		t.Errorf("the order of the workspaces moved the store: %q, %q", ab, ba)
	}
	if ab == a || ab == other {
		t.Errorf("other workspaces or another platform share the store %q", ab)
	}
	if !strings.Contains(filepath.Base(filepath.Dir(ab)), "acme.moleculesai.app-ws-a-") {
		t.Errorf("store folder %q does not name the platform and first workspace", filepath.Dir(ab))
	}
	if d, _ := broker.StoreLocation(env("HOME", home, "MOLECULE_STATE_DIR", state), "https://x", []string{"w"}); !strings.HasPrefix(d, state) {
		t.Errorf("MOLECULE_STATE_DIR: %q not under %q", d, state)
	}
	if runtime.GOOS == "linux" {
		if d, _ := broker.StoreLocation(env("HOME", home, "XDG_STATE_HOME", state), "https://x", []string{"w"}); !strings.HasPrefix(d, filepath.Join(state, "molecule-relay")) {
			t.Errorf("XDG_STATE_HOME: %q not under %q", d, state)
		}
	}
	if d, from := broker.StoreLocation(env(), "https://x", []string{"w"}); d != broker.LegacyStoreDir || from != broker.StoreFromNoHome {
		t.Errorf("no HOME: %q (%s), want the working directory's", d, from)
	}
}
