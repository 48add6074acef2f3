package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// BenchmarkDispatch measures dispatcher throughput on file storage: b.N
// inbound messages published up front, then one Drain handles them all
// (record, reply publish, ack each). Reported as msgs/s.
func BenchmarkDispatch(b *testing.B) {
	cases := []struct {
		name        string
		concurrency int
		sleep       time.Duration
	}{
		{"echo/c16", 16, 0},
		{"echo/c64", 64, 0},
		{"sleep100ms/c64", 64, 100 * time.Millisecond},
		{"sleep100ms/c128", 128, 100 * time.Millisecond},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			srv := natstest.Start(b)
			_, js := natstest.Connect(b, srv.ClientURL())
			ctx := context.Background()
			topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
			if err != nil {
				b.Fatal(err)
			}
			n := max(b.N, 1)
			pubs := make([]jetstream.PubAckFuture, 0, n)
			for i := range n {
				in := events.Inbound{WorkspaceID: ws, ActivityID: fmt.Sprintf("act-%d", i), Source: events.SourceCanvasUser, Text: "hi"}
				data, _ := in.Marshal()
				f, err := js.PublishAsync(events.InboundSubject(ws), data, jetstream.WithMsgID(events.InboundMsgID(ws, in.ActivityID)))
				if err != nil {
					b.Fatal(err)
				}
				pubs = append(pubs, f)
			}
			<-js.PublishAsyncComplete()
			for _, f := range pubs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
				if tc.sleep > 0 {
					time.Sleep(tc.sleep)
				}
				return "echo: " + req.Message.Text, nil
			})
			d, err := dispatcher.New(js, topo, h, dispatcher.Config{Config: stage.Config{Concurrency: tc.concurrency, Logger: quiet}})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			st, err := d.Drain(ctx, 100*time.Millisecond)
			el := time.Since(start) - 100*time.Millisecond // the idle wait at the end
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if st.Replied != uint64(n) {
				b.Fatalf("replied %d of %d", st.Replied, n)
			}
			b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
		})
	}
}
