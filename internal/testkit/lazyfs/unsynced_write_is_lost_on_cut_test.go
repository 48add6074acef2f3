//go:build linux

package lazyfs_test

import (
	"path/filepath"
	"slices"
	"testing"
)

// A write that was never fsynced is gone after a cut: an append to a
// synced file leaves the synced part, an overwrite brings the old bytes
// back, and a new file never synced comes back empty (its name, metadata,
// survives).
func TestUnsyncedWriteIsLostOnCut(t *testing.T) {
	l := mount(t)
	synced := filepath.Join(l.Dir(), "synced")
	writeFile(t, synced, "durable", true)
	appendFile(t, synced, " and lost")
	overwritten := filepath.Join(l.Dir(), "overwritten")
	writeFile(t, overwritten, "old bytes", true)
	writeFile(t, overwritten, "NEW", false) // O_TRUNC, then a write: both unsynced
	fresh := filepath.Join(l.Dir(), "fresh")
	writeFile(t, fresh, "never synced", false)

	rep := cut(t, l)

	for path, want := range map[string]string{synced: "durable", overwritten: "old bytes", fresh: ""} {
		if got := content(t, path); got != want {
			t.Errorf("%s after the cut = %q, want %q", filepath.Base(path), got, want)
		}
	}
	slices.Sort(rep.Paths)
	if !slices.Equal(rep.Paths, []string{"fresh", "overwritten", "synced"}) {
		t.Errorf("cut report paths = %v, want the three files", rep.Paths)
	}
	if rep.Files != 3 || rep.Bytes != int64(len(" and lost")+len("NEW")+len("never synced")) {
		t.Errorf("cut report = %+v, want 3 files and the unsynced bytes", rep)
	}
}
