package jsfast_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/jsfast"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// BenchmarkPublish times the dispatcher's reply publish (a message with a
// Nats-Msg-Id, no options) through nats.go and the fast publish, against
// the embedded server (file storage); metrics as BenchmarkKVOps.
func BenchmarkPublish(b *testing.B) {
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}}); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"workspace_id":"ws-1","activity_id":"act-1","text":"echo: hello"}`)
	n := 0
	for _, impl := range []struct {
		name string
		js   jetstream.JetStream
	}{{"natsgo", js}, {"fast", jsfast.WrapJetStream(js)}} {
		b.Run(impl.name, func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				n++
				m := &nats.Msg{Subject: "r.ws-1", Data: data, Header: nats.Header{}}
				m.Header.Set(jetstream.MsgIDHeader, "ws-1/act-"+strconv.Itoa(n))
				if _, err := impl.js.PublishMsg(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
