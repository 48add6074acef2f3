package pythonfunction_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/exampletest"
)

// The relay runs example:answer through run.py: the function gets the
// message's text and the history, and the canvas user gets what it
// returned (its print went to stderr, not into the answer).
func TestPythonFunctionAnswersThroughRelay(t *testing.T) {
	exampletest.Need(t, "python3")
	got := exampletest.Ask(t, []string{"MOLECULE_HANDLER=exec:python3 " + exampletest.Abs(t, "run.py") + " example:answer"}, "hello")
	if want := "You said 'hello'; I remember 0 earlier turn(s)."; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// With VIRTUAL_ENV passed by MOLECULE_HANDLER_ENV, run.py runs under the
// virtualenv's python and the function imports a package only the
// virtualenv has.
func TestPythonFunctionImportsFromVirtualenv(t *testing.T) {
	exampletest.Need(t, "python3")
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command("python3", "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	site, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(strings.TrimSpace(string(site)), "venv_only.py")
	if err := os.WriteFile(pkg, []byte("GREETING = 'hello from the virtualenv'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := exampletest.Ask(t, []string{
		"MOLECULE_HANDLER=exec:python3 " + exampletest.Abs(t, "run.py") + " example:from_venv",
		"MOLECULE_HANDLER_ENV=VIRTUAL_ENV", "VIRTUAL_ENV=" + venv,
	}, "Ada")
	if want := "hello from the virtualenv, Ada"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// run.py on a payload: an async function given the whole message (a
// structured answer, printed as JSON), a file path in place of a module,
// None printing nothing, and a bad spec or an exception exiting non-zero.
func TestPythonFunctionForms(t *testing.T) {
	exampletest.Need(t, "python3")
	for _, tc := range []struct {
		spec, stdout string
		code         int
	}{
		{"example.py:answer_async", `{"text": "async: hi", "reply": true}`, 0},
		{"example:stay_silent", "", 0},
		{"example", "", 1},
		{"example:nope", "", 1},
		{"example:from_venv", "", 1}, // no virtualenv: the import fails
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "python3", "run.py", tc.spec)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		cmd.Stdin = strings.NewReader(`{"message":{"text":"hi"}}`)
		out, err := cmd.Output()
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || string(out) != tc.stdout {
			t.Errorf("%s: exit %d, stdout %q; want %d, %q", tc.spec, code, out, tc.code, tc.stdout)
		}
	}
}
