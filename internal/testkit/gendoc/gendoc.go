// Package gendoc keeps the generated part of a document in docs/ current:
// a hand-written head, a mark, then what the code generates. A test
// compares the file with what it would write and fails when it is stale;
// with its -update flag it rewrites the file instead.
package gendoc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Check compares the part of path below mark with generated. With update
// it rewrites that part; otherwise a stale file fails the test with regen,
// the command that regenerates it.
func Check(t *testing.T, path, mark string, generated []byte, update bool, regen string) {
	t.Helper()
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := bytes.Cut(cur, []byte(mark))
	if !ok {
		t.Fatalf("%s lacks the mark %q", path, mark)
	}
	want := append(append(head, mark...), generated...)
	if update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(cur, want) {
		t.Errorf("%s is stale: run %s", filepath.Base(path), regen)
	}
}
