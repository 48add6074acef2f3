package stage_test

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A goroutine per message paid the growth of a fresh stack on every
// message; a stage's workers take the next message instead. At
// Concurrency 1 the messages run one after another, so every one of them
// must run on the same goroutine, and the drain must still end with all
// of them acked.
func TestWorkersOutliveTheirMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, events.TopologyConfig{})
	const n = 6
	e.publish(t, n)
	var mu sync.Mutex
	goroutines := map[string]int{}
	r := e.runner(t, stage.Config{Concurrency: 1}, nil, func(ctx context.Context, d *stage.Delivery) {
		mu.Lock()
		goroutines[goroutineID()]++
		mu.Unlock()
		_ = d.Msg.Ack()
	})
	if _, err := r.Drain(ctx(t), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range goroutines {
		total += c
	}
	if total != n || len(goroutines) != 1 {
		t.Errorf("%d messages processed on %d goroutines %v, want %d on 1", total, len(goroutines), goroutines, n)
	}
	if left := e.left(t); left != 0 {
		t.Errorf("%d messages left in the consumer after the drain, want 0", left)
	}
}

// goroutineID is the caller's goroutine number, from the first line of
// its stack trace ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	return string(buf[:bytes.IndexByte(buf, ' ')])
}
