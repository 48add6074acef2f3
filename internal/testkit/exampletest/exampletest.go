// Package exampletest runs an example's handler the way molecule-relay
// runs it: the settings read from an environment by the relay's own
// configuration (MOLECULE_HANDLER, MOLECULE_HANDLER_ENV, ...), the handler
// built from them, the real stages on an embedded NATS, and the platform
// double in the place of Molecule.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Token is the workspace token the relay under test holds: put in its
// environment, never to be seen by a handler.
const Token = "ws-token-a-handler-must-never-see-0000000000"

// Ask sends text as the workspace's canvas user to a relay configured by
// environ (KEY=value, as a shell would export them) and returns the answer
// the relay posted, within 30 s.
func Ask(t *testing.T, environ []string, text string) string {
	t.Helper()
	cfg, err := config.Load(nil, append([]string{"MOLECULE_WORKSPACE_TOKEN=" + Token}, environ...))
	if err == nil {
		err = cfg.Validate(config.NeedHandler)
	}
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	h, err := relay.NewHandler(cfg)
	if err != nil {
		t.Fatalf("handler: %v", err)
	}
	w := pipelinetest.New(t, pipelinetest.Options{})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	if _, _, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, text); err != nil {
		t.Fatal(err)
	}
	pipelinetest.Eventually(t, 30*time.Second, "the answer", func() bool {
		return len(w.Plat.Notifications(w.Agent.ID)) > 0 || len(w.DeadLetters()) > 0
	})
	if dl := w.DeadLetters(); len(dl) > 0 {
		if d := dl[0].DeadLetter; d != nil {
			t.Fatalf("the message was dead-lettered after %d deliveries: %s: %s", d.Deliveries, d.Reason, d.Error)
		}
		t.Fatalf("the message was dead-lettered: %+v", dl[0])
	}
	n := w.Plat.Notifications(w.Agent.ID)
	if len(n) != 1 {
		t.Fatalf("canvas got %+v, want one answer", n)
	}
	return n[0].Message
}

// StandInFirstOnPath puts the directory dir (relative to the test's)
// first on PATH, for the test and the handlers it runs, so that a
// stand-in for an agent CLI is found in its place.
func StandInFirstOnPath(t *testing.T, dir string) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", abs+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Need fails the test when a tool the example needs is missing (.ci/run
// installs them).
func Need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the example needs %s (.ci/run installs it): %v", tool, err)
		}
	}
}

// Abs is path made absolute, for an exec: spec.
func Abs(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
