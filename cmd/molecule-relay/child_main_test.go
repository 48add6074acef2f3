package main

import (
	"os"
	"testing"
)

// childEnv, when set, makes the test binary run as molecule-relay itself:
// the restart tests start real processes and send them real signals.
const childEnv = "MOLECULE_RELAY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}
