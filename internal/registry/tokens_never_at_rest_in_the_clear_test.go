package registry_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

const (
	wsA  = "11111111-1111-4111-8111-111111111111"
	wsB  = "22222222-2222-4222-8222-222222222222"
	tokA = "tok-AAAA-secret-0123456789abcdef"
	tokB = "tok-BBBB-secret-fedcba9876543210"
)

func newKey(t *testing.T) (*registry.Key, string) {
	t.Helper()
	k, s, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k, s
}

func open(t *testing.T, url string, k *registry.Key) *registry.Registry {
	t.Helper()
	_, js := natstest.Connect(t, url)
	r, err := registry.Open(context.Background(), js, k, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTokensNeverAtRestInTheClear: after adds, a pause and a rotation,
// neither the raw KV values nor any file of the NATS store directory
// contains a token, and each token opens again with the key.
func TestTokensNeverAtRestInTheClear(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	k, _ := newKey(t)
	r := open(t, srv.ClientURL(), k)
	for _, e := range []registry.Entry{{ID: wsA, Token: tokA, PlatformURL: "http://a"}, {ID: wsB, Token: tokB, PlatformURL: "http://b"}} {
		if err := r.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetPaused(ctx, wsB, true); err != nil {
		t.Fatal(err)
	}
	k2, _ := newKey(t)
	if n, err := r.Rotate(ctx, k2); err != nil || n != 2 {
		t.Fatalf("rotate: %d, %v", n, err)
	}
	_, js := natstest.Connect(t, srv.ClientURL())
	kv, err := js.KeyValue(ctx, registry.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{wsA, wsB} {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{tokA, tokB} {
			if bytes.Contains(e.Value(), []byte(tok)) {
				t.Fatalf("raw KV value of %s holds a token: %s", id, e.Value())
			}
		}
	}
	srv.Stop() // flush the store
	files := 0
	err = filepath.WalkDir(srv.StoreDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, tok := range []string{tokA, tokB} {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("store file %s holds a token", p)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk store: %d files, %v", files, err)
	}
	srv2 := srv.Restart(t)
	list, err := open(t, srv2.ClientURL(), k2).List(ctx)
	if err != nil || len(list) != 2 || list[0].Token != tokA || list[1].Token != tokB || !list[1].Paused {
		t.Fatalf("after rotation and restart: %v %v", list, err)
	}
	if _, err := open(t, srv2.ClientURL(), k).List(ctx); !errors.Is(err, registry.ErrKey) {
		t.Fatalf("old key after rotation: %v, want ErrKey", err)
	}
}
