package poller_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A refused registration is logged where it happens, with the workspace,
// the cause and what to do, once, although every poll cycle meets it
// again; when it stops, the recovery is logged once. Before, the
// long-running poller logged nothing until the workspace stopped (and a
// refused registration never stops it).
func TestRepeatedFailureLoggedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/registry/register",
		Status: http.StatusBadRequest, Body: `{"error":"url is required for push-mode workspaces"}`})
	var logs pipelinetest.LogBuffer
	p := e.poller(poller.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	stop := run(t, p)
	registers := func() int { return e.requests(http.MethodPost, "/registry/register") }
	waitFor(t, 10*time.Second, "five refused registrations", func() bool { return registers() >= 5 })

	out := logs.String()
	if n := strings.Count(out, "cause=registration_refused"); n != 1 {
		t.Fatalf("%d log lines for %d identical refusals, want 1:\n%s", n, registers(), out)
	}
	line := out[strings.Index(out, "cause=registration_refused"):]
	for _, want := range []string{"level=WARN", "workspace=" + e.ws.ID, "url is required", "action="} {
		if !strings.Contains(out, want) {
			t.Fatalf("the failure line lacks %q:\n%s", want, line)
		}
	}

	e.plat.ClearFaults()
	e.waitSeeded(e.ws.ID)
	waitFor(t, 10*time.Second, "the recovery logged", func() bool {
		return strings.Contains(logs.String(), "polling works again")
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := strings.Count(logs.String(), "polling works again"); n != 1 {
		t.Fatalf("recovery logged %d times", n)
	}
}
