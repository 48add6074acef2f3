package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// connect --once, as a CI job runs it (the built binary, a fresh store
// with the embedded NATS server, the echo handler, the default --idle),
// finishes near the floor: within 300 ms of wall time with nothing
// queued and within 600 ms with 10 messages queued, against the double
// on its default generation. The figures are the median of 5 runs, each
// on a fresh store after a first run left its checkpoint on the feed.
// Before, the runs took 1.2–1.4 s and 1.5–1.7 s: fixed waits (an idle
// second per drained queue, the agent API's start). Timings mean nothing
// under the race detector: skipped there.
//
//	go test -run TestConnectOnceWallTime -v ./cmd/molecule-relay/
func TestConnectOnceWallTime(t *testing.T) {
	if raceEnabled {
		t.Skip("timings mean nothing under the race detector")
	}
	if testing.Short() {
		t.Skip("times five runs of the binary per case")
	}
	bin := relayBin(t)
	for _, tc := range []struct {
		queued int
		budget time.Duration
	}{{0, 300 * time.Millisecond}, {10, 600 * time.Millisecond}} {
		t.Run(fmt.Sprintf("%d queued", tc.queued), func(t *testing.T) {
			med, all, cpu := onceMedian(t, bin, tc.queued, 5)
			t.Logf("connect --once, %d queued: median %s of %v (CPU, user+system: median %s)", tc.queued, med, all, cpu)
			if med > tc.budget {
				t.Errorf("median %s over the budget of %s (%v)", med, tc.budget, all)
			}
		})
	}
}

// onceMedian times runs of connect --once, each with n messages queued
// before it, on a workspace whose first run left a checkpoint, and
// checks that each run answered its n messages.
func onceMedian(t *testing.T, bin string, n, runs int) (wall time.Duration, all []time.Duration, cpu time.Duration) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("ci-agent")
	environ := append(os.Environ(), "MOLECULE_PLATFORM_URL="+srv.URL(), "MOLECULE_WORKSPACE_ID="+ws.ID,
		"MOLECULE_WORKSPACE_TOKEN="+ws.Token, "NATS_URL=", "MOLECULE_LOG_LEVEL="+os.Getenv("ONCE_LOG_LEVEL"))
	var cpus []time.Duration
	run := func() time.Duration {
		t.Helper()
		cmd := exec.Command(bin, "connect", "--once")
		cmd.Env = append(environ, "NATS_STORE_DIR="+t.TempDir())
		cmd.Dir = t.TempDir()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("connect --once: %v\n%s\n%s", err, out.String(), errb.String())
		}
		cpus = append(cpus, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		if os.Getenv("ONCE_LOG_LEVEL") != "" {
			t.Logf("started %s, took %s\n%s\n%s", start.UTC().Format("15:04:05.000"), took, out.String(), errb.String())
		}
		return took
	}
	run() // registers the workspace and leaves the first checkpoint
	cpus = nil
	var took []time.Duration
	for i := range runs {
		before := len(srv.Notifications(ws.ID))
		for j := range n {
			if code, _, err := srv.SendCanvas(context.Background(), ws.ID, fmt.Sprintf("m%d-%d", i, j)); err != nil || code != 200 {
				t.Fatalf("send: %d %v", code, err)
			}
		}
		took = append(took, run().Round(time.Millisecond))
		if got := len(srv.Notifications(ws.ID)) - before; got != n {
			t.Fatalf("run %d answered %d of %d messages", i, got, n)
		}
		for _, m := range srv.Notifications(ws.ID)[before:] {
			if !strings.HasPrefix(m.Message, "echo: m") {
				t.Fatalf("reply %q", m.Message)
			}
		}
	}
	return median(took), took, median(cpus).Round(time.Millisecond)
}
