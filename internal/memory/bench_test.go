package memory_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// benchConversations is how many conversations the benchmarks spread
// their messages over.
const benchConversations = 100

// BenchmarkHistoryReadWrite is memory's cost per message, one at a time:
// the dispatcher's read of a full conversation (20 turns of ~100 bytes)
// plus the replier's append of the two new turns (one publish), on file
// storage over loopback TCP.
func BenchmarkHistoryReadWrite(b *testing.B) {
	w := pipelinetest.New(b, pipelinetest.Options{})
	s := memoryOn(b, w.Obs, memory.Config{Turns: memory.DefaultTurns})
	ctx := context.Background()
	text := strings.Repeat("x", 100)
	for c := range benchConversations {
		for i := range memory.DefaultTurns {
			if _, err := s.Record(ctx, ws, fmt.Sprint("c", c), handler.Turn{Role: handler.RoleUser, Text: text, ActivityID: fmt.Sprint("seed-", i)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		conv := fmt.Sprint("c", i%benchConversations)
		turns, err := s.Load(ctx, ws, conv)
		if err != nil || len(turns) != memory.DefaultTurns {
			b.Fatalf("load: %d turns, %v", len(turns), err)
		}
		act := fmt.Sprint("a-", i)
		if _, err := s.Record(ctx, ws, conv,
			handler.Turn{Role: handler.RoleUser, Text: text, ActivityID: act},
			handler.Turn{Role: handler.RoleAgent, Text: text, ActivityID: act}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/msg")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/msg")
}

// BenchmarkEchoWithAndWithoutMemory is the echo throughput of a dispatcher
// and a replier (concurrency 16 each, the defaults) draining b.N canvas
// messages over benchConversations A2A contexts, posting to the platform
// double, with memory off and on: the difference is memory's share.
func BenchmarkEchoWithAndWithoutMemory(b *testing.B) {
	for _, turns := range []int{0, memory.DefaultTurns} {
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			benchEcho(b, turns)
		})
	}
}

func benchEcho(b *testing.B, turns int) {
	w := pipelinetest.New(b, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithRateLimit(0, 0), moleculetest.WithoutRequestLog()}})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	n := max(b.N, 1)
	pubs := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		in := events.Inbound{WorkspaceID: w.Agent.ID, ActivityID: fmt.Sprint("act-", i), Source: events.SourceCanvasUser,
			ContextID: fmt.Sprint("c", i%benchConversations), Text: "hi " + strings.Repeat("x", 100), CreatedAt: time.Now()}
		data, _ := in.Marshal()
		f, err := w.Obs.JS.PublishAsync(events.InboundSubject(w.Agent.ID), data, jetstream.WithMsgID(events.InboundMsgID(w.Agent.ID, in.ActivityID)))
		if err != nil {
			b.Fatal(err)
		}
		pubs = append(pubs, f)
	}
	<-w.Obs.JS.PublishAsyncComplete()
	for _, f := range pubs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	dp, rp := w.Proc(), w.Proc()
	dm, rm := memoryOff(b, dp, turns), memoryOff(b, rp, turns)
	d, err := dispatcher.New(dp.JS, dp.Topo, handler.Echo, dispatcher.Config{Config: stage.Config{Logger: quiet}, Memory: dm})
	if err != nil {
		b.Fatal(err)
	}
	r, err := replier.New(rp.JS, rp.Topo, map[string]*molecule.Client{w.Agent.ID: w.Client(w.Agent)}, replier.Config{Config: stage.Config{Logger: quiet}, Memory: rm})
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime()
	b.ResetTimer()
	start := time.Now()
	done := make(chan replier.Stats, 1)
	go func() {
		// The replier drains while the dispatcher publishes; its idle
		// wait starts only once the reply queue stays empty.
		st, _ := r.Drain(ctx, 500*time.Millisecond)
		done <- st
	}()
	dst, err := d.Drain(ctx, 100*time.Millisecond)
	rst := <-done
	el := time.Since(start) - 500*time.Millisecond
	b.StopTimer()
	if err != nil || dst.Replied != uint64(n) || rst.Notified != uint64(n) {
		b.Fatalf("replied %d, notified %d of %d (%v)", dst.Replied, rst.Notified, n, err)
	}
	if e := dst.MemoryErrors + rst.MemoryErrors; e != 0 {
		b.Fatalf("%d memory errors", e)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
	// On a machine shared with other work, the wall-clock rate swings
	// with the load; the CPU this process (stages, embedded nats-server,
	// platform double) spent per message does not.
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(n), "cpu-µs/msg")
}

// cpuTime is the user+system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memoryOff is memoryOn, or nil for 0 turns.
func memoryOff(b *testing.B, p *pipelinetest.Proc, turns int) *memory.Store {
	if turns == 0 {
		return nil
	}
	return memoryOn(b, p, memory.Config{Turns: turns})
}

// BenchmarkLoadOfAConversationIdleForSeconds is the dispatcher's read of
// a conversation this Store read before, more than cacheFor ago, with one
// new message since (what a conversation sees when its messages come
// seconds apart), among n conversations of 10 messages (20 turns) each,
// interleaved in the stream as concurrent conversations write them.
// cpu-µs/load is the process's CPU, the embedded server's included.
func BenchmarkLoadOfAConversationIdleForSeconds(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		b.Run(fmt.Sprint("conversations=", n), func(b *testing.B) {
			w := pipelinetest.New(b, pipelinetest.Options{})
			s := memoryOn(b, w.Obs, memory.Config{Turns: memory.DefaultTurns})
			ctx := context.Background()
			text := strings.Repeat("x", 100)
			record := func(conv, act string) {
				if _, err := s.Record(ctx, ws, conv, handler.Turn{Role: handler.RoleUser, Text: text, ActivityID: act},
					handler.Turn{Role: handler.RoleAgent, Text: text, ActivityID: act}); err != nil {
					b.Error(err)
				}
			}
			for i := range memory.DefaultTurns / 2 {
				var wg sync.WaitGroup
				for c := range n {
					wg.Go(func() { record(fmt.Sprint("c", c), fmt.Sprint("seed-", i)) })
					if c%64 == 63 {
						wg.Wait()
					}
				}
				wg.Wait()
			}
			memory.SetReadCacheFor(s, 0) // every entry is stale at its next read
			for c := range n {
				if _, err := s.Load(ctx, ws, fmt.Sprint("c", c)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				conv := fmt.Sprint("c", (i*7919)%n)
				b.StopTimer()
				record(conv, fmt.Sprint("a-", i))
				b.StartTimer()
				turns, err := s.Load(ctx, ws, conv)
				if err != nil || len(turns) != memory.DefaultTurns {
					b.Fatalf("load: %d turns, %v", len(turns), err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/load+record")
		})
	}
}
