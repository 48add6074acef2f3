package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The version given to -ldflags -X (as the Makefile, the Dockerfile, ko
// and goreleaser pass it) is what `molecule-relay version` prints.
func TestVersionStampedWithLdflags(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "molecule-relay")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/molecule-ai/molecule-relay/internal/version.Version=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "molecule-relay v9.8.7-test" {
		t.Fatalf("version printed %q, want %q", got, "molecule-relay v9.8.7-test")
	}
}
