// Package version holds the relay's version, stamped into every binary at
// build time:
//
//	go build -ldflags "-X github.com/molecule-ai/molecule-relay/internal/version.Version=v1.2.3" ...
//
// The Makefile, the Dockerfile, ko (.ko.yaml) and goreleaser
// (.goreleaser.yaml) all set it. An unstamped build reports the module
// version the go command recorded (a `go install ...@v1.2.3`), else "dev".
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set with -ldflags -X; see the package comment.
var Version = ""

// String returns the stamped version, the main module's version from the
// build info when not stamped, or "dev".
func String() string {
	if Version != "" {
		return Version
	}
	return builtVersion()
}

// builtVersion reads the build info once: every heartbeat carries the
// version, and debug.ReadBuildInfo parses the whole embedded module list
// on each call (4 % of an idle fleet's CPU at 1,000 workspaces,
// docs/performance.md "An idle fleet").
var builtVersion = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
})
