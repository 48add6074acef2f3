package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The child-process tests run the CLI built without the race detector,
// as it ships: a race-instrumented binary spends hundreds of milliseconds
// in its exit (racefini), which is not what Claude Code's stop sequence
// would meet.
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// relayBin builds molecule-relay once per test run and returns its path.
func relayBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "molecule-relay-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "molecule-relay")
		build := exec.Command("go", "build", "-o", binPath, ".")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOFLAGS=") { // GOFLAGS=-race would instrument it
				build.Env = append(build.Env, kv)
			}
		}
		out, err := build.CombinedOutput()
		if err != nil {
			binErr = err
			t.Logf("go build: %s", out)
		}
	})
	if binErr != nil {
		t.Fatalf("building molecule-relay: %v", binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	// A relay's default store is in the user's state directory: the tests'
	// relays (this process's and the binaries it starts) keep theirs here.
	state, err := os.MkdirTemp("", "molecule-relay-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	code := m.Run()
	_ = os.RemoveAll(state)
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}
