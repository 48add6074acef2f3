//go:build linux

package lazyfs_test

import (
	"os"
	"path/filepath"
	"testing"
)

// Metadata is not modelled: a rename, a create, a mkdir and an unlink are
// durable at once, as if each directory were fsynced. The data follows its
// inode: a temporary file renamed over a synced one without a sync comes
// back empty (a write-then-rename without fsync, as a filesystem without
// ext4's auto_da_alloc may leave it).
func TestMetadataSurvivesCutAndDataFollowsItsInode(t *testing.T) {
	l := mount(t)
	state := filepath.Join(l.Dir(), "state")
	writeFile(t, state, "v1", true)
	tmp := state + ".tmp"
	writeFile(t, tmp, "v2", false)
	if err := os.Rename(tmp, state); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(l.Dir(), "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(l.Dir(), "gone")
	writeFile(t, gone, "x", true)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if got := content(t, state); got != "v2" {
		t.Fatalf("before the cut state = %q, want v2", got)
	}

	cut(t, l)

	if got := content(t, state); got != "" {
		t.Errorf("after the cut state = %q, want empty (the renamed file's synced data)", got)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the rename was undone: %s exists (%v)", tmp, err)
	}
	if fi, err := os.Stat(filepath.Join(l.Dir(), "d")); err != nil || !fi.IsDir() {
		t.Errorf("the mkdir was undone: %v", err)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the unlink was undone: %v", err)
	}
}
