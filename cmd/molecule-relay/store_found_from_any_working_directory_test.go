package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The store follows the user, not the working directory (issue 37): a
// relay started from another directory finds the same store, and so do
// status, dlq and history; with no store they say where they looked and
// exit 1 rather than create an empty one and report it healthy. A store in
// the old place (./.molecule-relay/nats) is still found and used, with one
// line saying so.
func TestStoreFoundFromAnyWorkingDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several relays")
	}
	w := newStoreWorld(t)
	a, b := t.TempDir(), t.TempDir()
	t.Chdir(a)
	w.connect(2)
	t.Chdir(b)
	w.connect(2)
	w.expectOnce("connect from two working directories")
	w.store(a, b) // exactly one

	t.Chdir(t.TempDir())
	for _, args := range [][]string{{"status"}, {"dlq", "list"}, {"history", "show", w.ws.ID}} {
		if r := runCLI(t, w.environ, args...); r.code != exitOK {
			t.Errorf("%v from another directory: exit %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, w.environ, "status"); !strings.Contains(r.stdout, w.ws.ID) {
		t.Errorf("status from another directory does not show the workspace:\n%s", r.stdout)
	}
	elsewhere := append(append([]string{}, w.environ...), "MOLECULE_STATE_DIR="+t.TempDir())
	for _, args := range [][]string{{"status"}, {"dlq", "list"}, {"history", "show", w.ws.ID}} {
		r := runCLI(t, elsewhere, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "no relay store at") {
			t.Errorf("%v with no store: exit %d, want %d saying there is no store\n%s", args, r.code, exitFailed, r.stderr)
		}
	}
	if got, _ := filepath.Glob(filepath.Join(".", "*")); len(got) != 0 {
		t.Errorf("status with no store left %q behind", got)
	}
}

// A store in the old place is used, so an upgrade answers nothing twice.
func TestStoreInTheOldPlaceIsUsedAndSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several relays")
	}
	w := newStoreWorld(t)
	t.Chdir(t.TempDir())
	old := w.environ
	w.environ = append(append([]string{}, old...), "NATS_STORE_DIR=.molecule-relay/nats")
	w.connect(2)
	w.environ = append(append([]string{}, old...), "MOLECULE_LOG_LEVEL=info")
	w.connect(2)
	w.expectOnce("a store in the old place, then the default")
	if !strings.Contains(w.stderr, "old place") {
		t.Errorf("no line says the store in the old place is used:\n%s", w.stderr)
	}
}
