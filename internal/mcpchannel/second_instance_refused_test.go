package mcpchannel_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Two mcp relays on one NATS (as two processes would be, each with its own
// connection and runtime): the second is refused, naming the workspace
// and the holder; once the first closes, a new one starts.
func TestSecondInstanceRefused(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	first, err := newRelay(t, w, mcpchannel.LeaseConfig{Instance: "first"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = newRelay(t, w, mcpchannel.LeaseConfig{Instance: "second"})
	if !errors.Is(err, mcpchannel.ErrAlreadyRunning) || !strings.Contains(err.Error(), w.Agent.ID) || !strings.Contains(err.Error(), "first") {
		t.Fatalf("second instance: %v, want ErrAlreadyRunning naming the workspace and the holder", err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := newRelay(t, w, mcpchannel.LeaseConfig{Instance: "third"}); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
}

// A crashed instance never releases its lease: it blocks the workspace
// until the lease expires, then a new instance takes it over.
func TestCrashedInstanceLeaseExpires(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)
	ws := []string{w.Agent.ID}
	crashed, err := mcpchannel.Acquire(ctx, w.Obs.JS, ws, mcpchannel.LeaseConfig{Instance: "crashed", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	crashed.Abandon()
	if _, err := mcpchannel.Acquire(ctx, w.Obs.JS, ws, mcpchannel.LeaseConfig{Instance: "next"}); !errors.Is(err, mcpchannel.ErrAlreadyRunning) {
		t.Fatalf("while the lease is live: %v", err)
	}
	var next *mcpchannel.Lease
	pipelinetest.Eventually(t, 10*time.Second, "the crashed lease to expire", func() bool {
		next, err = mcpchannel.Acquire(ctx, w.Obs.JS, ws, mcpchannel.LeaseConfig{Instance: "next"})
		return err == nil
	})
	next.Release()
}
