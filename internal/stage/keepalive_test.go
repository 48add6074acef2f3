package stage_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// progressMsg counts InProgress calls; every other method is unused.
type progressMsg struct {
	jetstream.Msg
	n atomic.Int32
}

func (m *progressMsg) InProgress() error { m.n.Add(1); return nil }

func TestKeepAliveTicksUntilStopped(t *testing.T) {
	t.Parallel()
	msg := &progressMsg{}
	progress, stop := stage.KeepAlive(msg, 20*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for msg.n.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no InProgress ticks")
		}
		time.Sleep(5 * time.Millisecond) // polling the counter, with a deadline
	}
	stop()
	stop() // idempotent
	n := msg.n.Load()
	progress()                        // a no-op after stop
	time.Sleep(60 * time.Millisecond) // three intervals, to see that none ticks
	// At most one tick that was already past its check when stop came.
	if got := msg.n.Load(); got > n+1 {
		t.Errorf("InProgress after stop: %d, had %d", got, n)
	}
}
