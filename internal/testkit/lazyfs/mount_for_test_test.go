//go:build linux

package lazyfs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/lazyfs"
)

// mount mounts a lazyfs on a fresh directory for t, or skips t where the
// machine offers no FUSE; it is unmounted at cleanup.
func mount(t *testing.T) *lazyfs.FS {
	t.Helper()
	if err := lazyfs.Unavailable(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := lazyfs.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return l
}

func cut(t *testing.T, l *lazyfs.FS) lazyfs.CutReport {
	t.Helper()
	rep, err := l.Cut()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func writeFile(t *testing.T, path, text string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
