package broker_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// BenchmarkClose measures Conn.Close on a healthy connection that has just
// acked a message: to an external server, and with the embedded server
// (whose shutdown it includes).
func BenchmarkClose(b *testing.B) {
	ext := natstest.Start(b).ClientURL()
	for _, tc := range []struct {
		name string
		cfg  func() broker.Config
	}{
		{"external", func() broker.Config { return broker.Config{URL: ext} }},
		{"embedded", func() broker.Config { return broker.Config{StoreDir: b.TempDir()} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				c, err := broker.Connect(context.Background(), tc.cfg(), nil)
				if err != nil {
					b.Fatal(err)
				}
				// A stream, and a publish not waited for: what Close must
				// get to the server.
				if _, err := c.JS.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}}); err != nil {
					b.Fatal(err)
				}
				if err := c.NC.Publish("bench.close", []byte("x")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				c.Close()
			}
		})
	}
}
