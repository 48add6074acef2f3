// Package version holds the relay's version, stamped into every binary at
// build time:
//
//	go build -ldflags "-X github.com/molecule-ai/molecule-relay/internal/version.Version=v1.2.3" ...
//
// The Makefile, the Dockerfile, ko (.ko.yaml) and goreleaser
// (.goreleaser.yaml) all set it. An unstamped build reports the module
// version the go command recorded (a `go install ...@v1.2.3`), else "dev".
package version

import "runtime/debug"

// Version is set with -ldflags -X; see the package comment.
var Version = ""

// String returns the stamped version, the main module's version from the
// build info when not stamped, or "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
