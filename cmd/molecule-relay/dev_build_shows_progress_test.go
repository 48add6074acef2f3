package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make dev's build (infra/dev/build-with-progress.sh) says what it does
// while it compiles: a line when it starts compiling, one every 50
// packages and one at the end; up to date it prints nothing; a compile
// error passes through with go's exit code. Before, a first make dev
// printed nothing for minutes. Here the packages to compile are 60 new
// ones of a scratch module, built by the real go.
func TestDevBuildShowsProgress(t *testing.T) {
	t.Parallel()
	script, _ := filepath.Abs("../../infra/dev/build-with-progress.sh")
	mod := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(mod, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, path), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module scratch\n\ngo 1.26\n")
	imports := ""
	for i := range 60 {
		write(fmt.Sprintf("p%d/p.go", i), fmt.Sprintf("package p%d\n\nconst N = %d\n", i, i))
		imports += fmt.Sprintf("\t_ \"scratch/p%d\"\n", i)
	}
	write("main.go", "package main\n\nimport (\n"+imports+")\n\nfunc main() {}\n")
	build := func() (int, string) {
		t.Helper()
		cmd := exec.Command("sh", script, filepath.Join(mod, "bin", "scratch"), ".")
		cmd.Dir = mod
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}

	code, out := build()
	if code != 0 || !strings.Contains(out, "compiling .: a first build compiles about 530 packages") ||
		!strings.Contains(out, "compiled 50 packages, ") || !strings.Contains(out, "compiled 61 packages in ") || strings.Contains(out, "scratch/p") {
		t.Fatalf("cold build: exit %d, output:\n%s", code, out)
	}
	if code, out := build(); code != 0 || out != "" {
		t.Fatalf("up-to-date build: exit %d, output %q; want nothing", code, out)
	}
	write("p7/p.go", "package p7\n\nconst N = undefined\n")
	if code, out := build(); code != 1 || !strings.Contains(out, "undefined: undefined") {
		t.Fatalf("compile error: exit %d, output:\n%s", code, out)
	}
}
