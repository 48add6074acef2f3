//go:build linux

package lazyfs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// What was fsynced, fdatasynced, or written on a file opened O_SYNC
// survives a cut; only what came after the sync is dropped.
func TestSyncedWriteSurvivesCut(t *testing.T) {
	l := mount(t)
	fsynced := filepath.Join(l.Dir(), "fsynced")
	writeFile(t, fsynced, "kept", true)
	appendFile(t, fsynced, " dropped")

	datasynced := filepath.Join(l.Dir(), "datasynced")
	f, err := os.Create(datasynced)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("kept too"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	f.Close()

	osync := filepath.Join(l.Dir(), "osync")
	g, err := os.OpenFile(osync, os.O_CREATE|os.O_WRONLY|os.O_SYNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteString("written O_SYNC"); err != nil {
		t.Fatal(err)
	}
	g.Close()

	cut(t, l)

	for path, want := range map[string]string{fsynced: "kept", datasynced: "kept too", osync: "written O_SYNC"} {
		if got := content(t, path); got != want {
			t.Errorf("%s after the cut = %q, want %q", filepath.Base(path), got, want)
		}
	}
}
