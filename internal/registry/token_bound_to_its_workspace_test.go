package registry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// TestTokenBoundToItsWorkspace: a sealed token copied onto another
// workspace's key does not open (the id is the additional authenticated
// data), so whoever can write the bucket cannot swap tokens unnoticed.
func TestTokenBoundToItsWorkspace(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	k, _ := newKey(t)
	r := open(t, srv.ClientURL(), k)
	if err := r.Put(ctx, registry.Entry{ID: wsA, Token: tokA, PlatformURL: "http://a"}); err != nil {
		t.Fatal(err)
	}
	_, js := natstest.Connect(t, srv.ClientURL())
	kv, _ := js.KeyValue(ctx, registry.Bucket)
	e, _ := kv.Get(ctx, wsA)
	if _, err := kv.Put(ctx, wsB, e.Value()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, wsB); !errors.Is(err, registry.ErrKey) {
		t.Fatalf("token moved to another id opened: %v", err)
	}
}

// TestKeyRefusedUnlessSafe: a key file readable by others, a short key
// and no key at all are refused with the variable's name.
func TestKeyRefusedUnlessSafe(t *testing.T) {
	_, s := newKey(t)
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	_ = os.WriteFile(loose, []byte(s), 0o644)
	tight := filepath.Join(dir, "tight")
	_ = os.WriteFile(tight, []byte(s+"\n"), 0o600)
	for name, c := range map[string]struct{ file, b64, want string }{
		"file 0644": {loose, "", "chmod 600"},
		"short":     {"", "c2hvcnQ=", "32 bytes"},
		"none":      {"", "", "MOLECULE_REGISTRY_KEY_FILE"},
	} {
		_, err := registry.LoadKey(c.file, c.b64)
		if !errors.Is(err, registry.ErrKey) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrKey naming %q", name, err, c.want)
		}
	}
	if _, err := registry.LoadKey(tight, ""); err != nil {
		t.Fatalf("0600 key file: %v", err)
	}
}

// TestImportFileRefusedUnless0600: an import file (it may hold tokens)
// and the token files it names must be the owner's only.
func TestImportFileRefusedUnless0600(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "a.token")
	_ = os.WriteFile(tf, []byte(tokA), 0o600)
	body := `[{"id":"` + wsA + `","token_file":"a.token","platform_url":"http://a"},{"workspace_id":"` + wsB + `","token":"` + tokB + `"}]`
	f := filepath.Join(dir, "ws.json")
	_ = os.WriteFile(f, []byte(body), 0o644)
	if _, err := registry.ReadFile(f, "http://default"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("0644 import file: %v", err)
	}
	_ = os.Chmod(f, 0o600)
	list, err := registry.ReadFile(f, "http://default")
	if err != nil || len(list) != 2 || list[0].Token != tokA || list[1].PlatformURL != "http://default" {
		t.Fatalf("import: %v %v", list, err)
	}
	_ = os.Chmod(tf, 0o640)
	if _, err := registry.ReadFile(f, "http://default"); err == nil || !strings.Contains(err.Error(), "a.token") {
		t.Fatalf("0640 token file: %v", err)
	}
}
