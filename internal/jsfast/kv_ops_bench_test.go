package jsfast_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/jsfast"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// BenchmarkKVOps times one Get, Create and Update against the embedded
// server over loopback TCP, through nats.go's bucket and the fast one (the
// same bucket, file storage, as EnsureBucket makes it). Allocations count
// the server's too, which are the same for both; so does cpu-ns/op, the
// process's CPU time per operation (client and server, user and system),
// which waiting for a shared machine's cores does not inflate as it does
// ns/op.
func BenchmarkKVOps(b *testing.B) {
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.ClientURL())
	// The stages' operations carry a deadline (internal/stage OpContext).
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	natsgo, err := events.EnsureBucket(ctx, js, jetstream.KeyValueConfig{Bucket: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	natsgo = natsgo.(*jsfast.KV).KeyValue // EnsureBucket hands out the fast one
	stream, err := js.Stream(ctx, "KV_bench")
	if err != nil {
		b.Fatal(err)
	}
	value := []byte(`{"outcome":"replied","at":"2026-11-27T03:00:00Z"}`)
	impls := []struct {
		name string
		kv   jetstream.KeyValue
		key  string
		rev  uint64
		n    int // keys created
	}{{name: "natsgo", kv: natsgo}, {name: "fast", kv: jsfast.Wrap(js, natsgo, stream)}}
	for i := range impls {
		impls[i].key = "ws-00000000-0000-0000-0000-000000000001.act-" + impls[i].name
		if impls[i].rev, err = natsgo.Put(ctx, impls[i].key, value); err != nil {
			b.Fatal(err)
		}
	}
	// Each operation runs for both, one after the other, so that the
	// bucket's growth (the creates) and the machine's load meet both alike.
	for _, impl := range impls {
		b.Run("get/"+impl.name, func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := impl.kv.Get(ctx, impl.key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for i := range impls {
		impl := &impls[i]
		b.Run("update/"+impl.name, func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				if impl.rev, err = impl.kv.Update(ctx, impl.key, value, impl.rev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for i := range impls {
		impl := &impls[i]
		b.Run("create/"+impl.name, func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				impl.n++
				if _, err := impl.kv.Create(ctx, impl.key+"."+strconv.Itoa(impl.n), value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPU starts counting the process's CPU time; the function it
// returns reports it per operation as cpu-ns/op.
func reportCPU(b *testing.B) func() {
	b.ReportAllocs()
	start := cpuTime(b)
	return func() {
		b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
