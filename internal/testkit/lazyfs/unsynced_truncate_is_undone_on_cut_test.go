//go:build linux

package lazyfs_test

import (
	"os"
	"path/filepath"
	"testing"
)

// A truncate is file data too: unsynced, a cut undoes it, by path
// (truncate(2)) and on an open file (ftruncate(2)), also after writes
// past the new end.
func TestUnsyncedTruncateIsUndoneOnCut(t *testing.T) {
	l := mount(t)
	byPath := filepath.Join(l.Dir(), "by-path")
	writeFile(t, byPath, "0123456789", true)
	if err := os.Truncate(byPath, 3); err != nil {
		t.Fatal(err)
	}

	onFile := filepath.Join(l.Dir(), "on-file")
	writeFile(t, onFile, "abcdefghij", true)
	f, err := os.OpenFile(onFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XYZ"), 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1); err != nil {
		t.Fatal(err)
	}
	f.Close()

	cut(t, l)

	for path, want := range map[string]string{byPath: "0123456789", onFile: "abcdefghij"} {
		if got := content(t, path); got != want {
			t.Errorf("%s after the cut = %q, want %q", filepath.Base(path), got, want)
		}
	}
}
