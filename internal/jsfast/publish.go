package jsfast

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is a jetstream.JetStream whose synchronous publish without
// options is a plain request on the connection with the PubAck read by
// hand (decodePubAck), nats.go's publish otherwise: the same retries on
// no responders, the same PubAck and errors. Publish options are opaque
// functions in nats.go, so a publish with any stays nats.go's; a caller
// that needs a header (Nats-Msg-Id) sets it on the message.
type JetStream struct {
	jetstream.JetStream
	nc             *nats.Conn
	defaultTimeout time.Duration
}

// WrapJetStream returns js with the fast publish (once: a wrapped js is
// returned as it is).
func WrapJetStream(js jetstream.JetStream) jetstream.JetStream {
	if _, ok := js.(*JetStream); ok {
		return js
	}
	return &JetStream{JetStream: js, nc: js.Conn(), defaultTimeout: js.Options().DefaultTimeout}
}

// PublishMsg is nats.go's PublishMsg.
func (j *JetStream) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if len(opts) > 0 {
		return j.JetStream.PublishMsg(ctx, m, opts...)
	}
	return publishMsg(ctx, j.nc, j.defaultTimeout, m)
}

// Publish is nats.go's Publish.
func (j *JetStream) Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if len(opts) > 0 {
		return j.JetStream.Publish(ctx, subject, data, opts...)
	}
	return publishMsg(ctx, j.nc, j.defaultTimeout, &nats.Msg{Subject: subject, Data: data})
}
