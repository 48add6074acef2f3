package relay

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A cluster without quorum that answers every try at once ("no
// responders") is still waited for the whole MOLECULE_STARTUP_TIMEOUT, with
// a last try at its end: before, the start-up gave up as soon as its next
// pause would have ended past the deadline, up to half a second early.
func TestStartupWaitsTheWholeTimeoutForAnAnsweringCluster(t *testing.T) {
	const timeout = 1200 * time.Millisecond
	tries := 0
	start := time.Now()
	err := waitJetStream(context.Background(), slog.New(slog.DiscardHandler), timeout, "JetStream topology", func(context.Context) error {
		tries++
		return jetstream.ErrJetStreamNotEnabled // what nats.go makes of "no responders"
	})
	took := time.Since(start)
	if !errors.Is(err, ErrStartupTimeout) {
		t.Fatalf("err = %v, want ErrStartupTimeout", err)
	}
	if took < timeout {
		t.Errorf("gave up after %s, before MOLECULE_STARTUP_TIMEOUT (%s), after %d tries", took, timeout, tries)
	}
}
