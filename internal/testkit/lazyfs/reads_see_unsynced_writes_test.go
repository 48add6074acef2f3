//go:build linux

package lazyfs_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Before a cut every reader sees the unsynced writes (read-your-writes, as
// through a page cache), through another handle and in the file's size;
// after the cut a handle that stayed open sees the synced state.
func TestReadsSeeUnsyncedWritesUntilTheCut(t *testing.T) {
	l := mount(t)
	path := filepath.Join(l.Dir(), "f")
	writeFile(t, path, "synced", true)
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	appendFile(t, path, "+cached")

	if got := readAll(t, r); got != "synced+cached" {
		t.Errorf("open handle before the cut reads %q, want the unsynced write too", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len("synced+cached")) {
		t.Errorf("size before the cut = %v (%v), want %d", fi.Size(), err, len("synced+cached"))
	}

	cut(t, l)

	if got := readAll(t, r); got != "synced" {
		t.Errorf("the same handle after the cut reads %q, want the synced state", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len("synced")) {
		t.Errorf("size after the cut = %v (%v), want %d", fi.Size(), err, len("synced"))
	}
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
