package stage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// BenchmarkOpDeadlines is the cost of one operation as the stages run it:
// an OpContext, a RetryRequest inside it and the cancel. "context" alone
// (a try that looks at its Done once, as a request does), then a KV read
// and a create against the embedded server.
func BenchmarkOpDeadlines(b *testing.B) {
	srv := natstest.Start(b)
	_, js := natstest.Connect(b, srv.ClientURL())
	topo, err := events.EnsureTopology(b.Context(), js, events.TopologyConfig{Storage: jetstream.MemoryStorage, DispatcherAckWait: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	r, err := stage.New(js, dlq.DispatcherTarget(topo), stage.Config{}, 0, 0, nil, func(context.Context, *stage.Delivery) {})
	if err != nil {
		b.Fatal(err)
	}
	runCtx := b.Context()
	kv := topo.Handled
	if _, err := kv.Put(runCtx, "bench-get", []byte(`{"outcome":"replied"}`)); err != nil {
		b.Fatal(err)
	}
	b.Run("context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := r.OpContext(runCtx)
			_ = stage.RetryRequest(ctx, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				default:
					return nil
				}
			})
			cancel()
		}
	})
	b.Run("kv-get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := r.OpContext(runCtx)
			if _, err := stage.RetryGet(ctx, kv, "bench-get"); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	b.Run("kv-create", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			ctx, cancel := r.OpContext(runCtx)
			if _, err := stage.RetryCreate(ctx, kv, fmt.Sprintf("bench-create-%d", i), []byte(`{}`)); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
}
