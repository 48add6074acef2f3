package lambdaemu_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// sam build runs `make build-<LogicalId>` with only ARTIFACTS_DIR set, not
// the function's architecture, so a stack deployed with Architecture
// x86_64 used to get an arm64 bootstrap unless GOARCH_LAMBDA=amd64 was
// also set. The artifact now holds both bootstraps and a script that runs
// the machine's one.
func TestSamBuildArtifactRunsOnEitherArchitecture(t *testing.T) {
	art := t.TempDir()
	build := exec.Command("make", "-s", "-f", "Makefile.deploy", "build-ReplierFunction", "ARTIFACTS_DIR="+art)
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build-ReplierFunction: %v\n%s", err, out)
	}
	for name, machine := range map[string]elf.Machine{"bootstrap-aarch64": elf.EM_AARCH64, "bootstrap-x86_64": elf.EM_X86_64} {
		f, err := elf.Open(filepath.Join(art, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f.Machine != machine {
			t.Errorf("%s is built for %s, want %s", name, f.Machine, machine)
		}
		_ = f.Close()
	}

	// On this machine the script runs this machine's bootstrap, under the
	// Runtime API, and the invocation succeeds.
	ns := natstest.Start(t)
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("sam-agent")
	repl := startFunction(t, art, "bootstrap", []string{
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"MOLECULE_DRAIN_IDLE=300ms",
		"MOLECULE_DRAIN_MARGIN=1s",
	})
	if r := repl.mustInvoke(t, replierTimeout); r.Stage != "replier" {
		t.Fatalf("invocation through the bootstrap script: %+v", r)
	}
}

// The script picks the bootstrap by uname -m, and says so when the machine
// has none.
func TestBootstrapScriptPicksTheMachinesBootstrap(t *testing.T) {
	art := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "..", "..", "functions", "bootstrap.sh"))
	if err != nil {
		t.Fatal(err)
	}
	writeScript(t, filepath.Join(art, "bootstrap"), string(script))
	for _, arch := range []string{"aarch64", "x86_64"} {
		writeScript(t, filepath.Join(art, "bootstrap-"+arch), "#!/bin/sh\necho ran "+arch+" \"$@\"\n")
	}
	for machine, want := range map[string]string{
		"aarch64": "ran aarch64 --flag",
		"x86_64":  "ran x86_64 --flag",
		"riscv64": "no bootstrap for this machine's architecture (riscv64)",
	} {
		fakeBin := t.TempDir()
		writeScript(t, filepath.Join(fakeBin, "uname"), "#!/bin/sh\necho "+machine+"\n")
		cmd := exec.Command(filepath.Join(art, "bootstrap"), "--flag")
		cmd.Env = append(os.Environ(), "PATH="+fakeBin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if !strings.Contains(string(out), want) {
			t.Errorf("uname -m %s: output %q (err %v), want %q", machine, out, err, want)
		}
		if machine == "riscv64" && err == nil {
			t.Errorf("uname -m %s: the script exited 0 with no bootstrap to run", machine)
		}
	}
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}
