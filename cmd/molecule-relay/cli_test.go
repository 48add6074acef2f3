package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Every command's -h (and --help) prints that command's help on stdout
// and exits 0, with only the settings it reads.
func TestEveryCommandHelpGoesToStdoutAndExitsZero(t *testing.T) {
	t.Chdir(t.TempDir())
	cases := []struct {
		args          []string
		want, notWant string
	}{
		{[]string{"connect", "-h"}, "MOLECULE_HANDLER", ""},
		{[]string{"poll", "--help"}, "MOLECULE_POLL_INTERVAL", "MOLECULE_HANDLER"},
		{[]string{"dispatch", "-h"}, "MOLECULE_HANDLER", "MOLECULE_POLL_INTERVAL"},
		{[]string{"reply", "-h"}, "MOLECULE_A2A_TIMEOUT", "MOLECULE_HANDLER"},
		{[]string{"status", "-h"}, "NATS_URL", "MOLECULE_HANDLER"},
		{[]string{"mcp", "-h"}, "MOLECULE_MCP_ANSWER_TIMEOUT", ""},
		{[]string{"dev", "-h"}, "--once", "MOLECULE_PLATFORM_URL"},
		{[]string{"emulator", "-h"}, "--env-file", "NATS_URL"},
		{[]string{"dlq", "-h"}, "replay SEQ", ""},
		{[]string{"dlq", "list", "-h"}, "--stage", "MOLECULE_PLATFORM_URL"},
		{[]string{"dlq", "show", "-h"}, "--json", ""},
		{[]string{"history", "--help"}, "forget", ""},
		{[]string{"history", "show", "-h"}, "--json", "MOLECULE_HANDLER"},
		{[]string{"completion", "-h"}, "fish", ""},
		{[]string{"help", "poll"}, "MOLECULE_POLL_INTERVAL", ""},
		{[]string{"--help"}, "emulator", ""},
	}
	for _, tc := range cases {
		r := runCLI(t, nil, tc.args...)
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0 and nothing on stderr", tc.args, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v: help lacks %q:\n%s", tc.args, tc.want, r.stdout)
		}
		if tc.notWant != "" && strings.Contains(r.stdout, tc.notWant) {
			t.Errorf("%v: help lists %q, which the command does not read", tc.args, tc.notWant)
		}
	}
}

// An unknown flag is one line naming it and pointing to -h, not the list.
func TestUnknownFlagIsOneLinePointingToHelp(t *testing.T) {
	t.Chdir(t.TempDir())
	r := runCLI(t, nil, "connect", "--concurency", "4")
	if r.code != exitUsage || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 2 and nothing on stdout", r.code, r.stdout)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.Contains(r.stderr, "-concurency") || !strings.Contains(r.stderr, "connect -h") {
		t.Fatalf("stderr %q: want one line naming the flag and pointing to connect -h", r.stderr)
	}
}

// A misspelled MOLECULE_* variable is named in a warning with the closest
// setting; variables read elsewhere (the CI script, Lambda) are not.
func TestMisspelledVariableWarnsWithClosestSetting(t *testing.T) {
	t.Chdir(t.TempDir())
	r := runCLI(t, []string{"MOLECULE_CONCURENCY=4", "MOLECULE_RELAY_BIN=/x", "MOLECULE_ZZZ=1"}, "connect")
	for _, want := range []string{"MOLECULE_CONCURENCY is not a setting", "did you mean MOLECULE_CONCURRENCY?", "MOLECULE_ZZZ is not a setting of molecule-relay (ignored)\n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "MOLECULE_RELAY_BIN") {
		t.Errorf("warned about MOLECULE_RELAY_BIN, which the CI script reads:\n%s", r.stderr)
	}
}

// A bad value is refused in our words, with what is accepted.
func TestBadValueErrorSaysWhatIsAccepted(t *testing.T) {
	t.Chdir(t.TempDir())
	r := runCLI(t, []string{"MOLECULE_SSE=yes", "MOLECULE_PAGE_LIMIT=ten"}, "connect")
	for _, want := range []string{`MOLECULE_SSE (--sse): "yes" is not a boolean; use true or false`, `MOLECULE_PAGE_LIMIT (--page-limit): "ten" is not a whole number`} {
		if r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, want)
		}
	}
	if strings.Contains(r.stderr, "strconv") {
		t.Errorf("stderr speaks strconv: %q", r.stderr)
	}
}

// --version prints what the version command prints.
func TestVersionFlagPrintsTheVersion(t *testing.T) {
	a, b := runCLI(t, nil, "--version"), runCLI(t, nil, "version")
	if a.code != exitOK || a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "molecule-relay ") {
		t.Fatalf("--version: exit %d %q; version: %q", a.code, a.stdout, b.stdout)
	}
}

// The completion scripts name every command and each command's flags, and
// each shell that is installed here accepts its script's syntax.
func TestCompletionScriptsListCommandsAndFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runCLI(t, nil, "completion", shell)
		if r.code != exitOK {
			t.Fatalf("completion %s: exit %d %s", shell, r.code, r.stderr)
		}
		for _, want := range []string{"emulator", "history", "poll-interval", "env-file", "replay"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("completion %s lacks %q", shell, want)
			}
		}
		if path, err := exec.LookPath(shell); err == nil {
			cmd := exec.Command(path, "-n")
			cmd.Stdin = strings.NewReader(r.stdout)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s -n rejects the script: %v\n%s", shell, err, out)
			}
		}
	}
	if r := runCLI(t, nil, "completion", "tcsh"); r.code != exitUsage || !strings.Contains(r.stderr, "bash, zsh or fish") {
		t.Errorf("completion tcsh: exit %d %q", r.code, r.stderr)
	}
}
