package jsfast_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/jsfast"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

func ackOutcome(ack *jetstream.PubAck, err error) outcome {
	o := outcomeOf(0, nil, err)
	if ack != nil {
		o.Rev, o.Value = ack.Sequence, ack.Stream
		if ack.Duplicate {
			o.Value += " (duplicate)"
		}
	}
	return o
}

// publishCase publishes to stream <name> (subjects <name>.>), made afresh
// for each publisher with MaxMsgSize 64; pub returns the last outcome,
// whose error must match wantIs and carry wantCode (none when both are
// unset) and whose PubAck, if any, must read want.
type publishCase struct {
	name     string
	pub      func(ctx context.Context, js jetstream.JetStream, stream string) outcome
	want     string
	wantIs   string
	wantCode jetstream.ErrorCode
}

func msg(subject string, hdr nats.Header) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: []byte("reply"), Header: hdr}
}

var publishCases = []publishCase{
	{"publish", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		return ackOutcome(js.PublishMsg(ctx, msg(s+".a", nil)))
	}, "A", "", 0},
	{"publish without header", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		return ackOutcome(js.Publish(ctx, s+".a", []byte("reply")))
	}, "B", "", 0},
	{"publish again with the same Nats-Msg-Id", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		_, _ = js.PublishMsg(ctx, msg(s+".a", nats.Header{jetstream.MsgIDHeader: {"id-1"}}))
		return ackOutcome(js.PublishMsg(ctx, msg(s+".a", nats.Header{jetstream.MsgIDHeader: {"id-1"}})))
	}, "C (duplicate)", "", 0},
	{"publish expecting another stream", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		return ackOutcome(js.PublishMsg(ctx, msg(s+".a", nats.Header{jetstream.ExpectedStreamHeader: {"OTHER"}})))
	}, "", "", 10060},
	{"publish expecting a wrong last subject sequence", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		return ackOutcome(js.PublishMsg(ctx, msg(s+".a", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"5"}})))
	}, "", "", jetstream.JSErrCodeStreamWrongLastSequence},
	{"publish larger than the stream takes", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		return ackOutcome(js.PublishMsg(ctx, &nats.Msg{Subject: s + ".a", Data: make([]byte, 100)}))
	}, "", "", jetstream.JSErrCodeStreamMessageExceedsMaximum},
	{"publish where no stream listens", func(ctx context.Context, js jetstream.JetStream, s string) outcome {
		return ackOutcome(js.PublishMsg(ctx, msg("nostream."+s, nil)))
	}, "", "ErrNoStreamResponse", 0},
}

// The fast publish answers as nats.go's PublishMsg and Publish: the same
// PubAck (stream, sequence, duplicate flag) and the same errors.
func TestFastPublishMatchesNatsGo(t *testing.T) {
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.ClientURL())
	fastJS := jsfast.WrapJetStream(js)
	if _, ok := fastJS.(*jsfast.JetStream); !ok {
		t.Fatalf("WrapJetStream returned %T: the table would compare nats.go with itself", fastJS)
	}
	for i, c := range publishCases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			run := func(js jetstream.JetStream, name string) outcome {
				stream := name + string(rune('A'+i))
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, MaxMsgSize: 64, Storage: jetstream.MemoryStorage}); err != nil {
					t.Fatal(err)
				}
				o := c.pub(ctx, js, stream)
				o.Value = o.Value[min(len(o.Value), len(name)):] // the stream names differ by publisher
				return o
			}
			want, got := run(js, "NATSGO"), run(fastJS, "FAST")
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("fast publish differs from nats.go's:\n nats.go %+v\n fast    %+v", want, got)
			}
			ok := got.Value == c.want && got.APICode == c.wantCode
			if c.wantIs != "" {
				ok = ok && got.Is[c.wantIs]
			} else if c.wantCode == 0 {
				ok = ok && got.Err == ""
			}
			if !ok {
				t.Fatalf("want ack %q, error matching %q, code %d; got %+v", c.want, c.wantIs, c.wantCode, got)
			}
		})
	}
}

// A publish nobody answers ends at its ctx's deadline, as nats.go's.
func TestFastPublishUnansweredEndsAtDeadline(t *testing.T) {
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.ClientURL())
	s.Stop()
	const deadline = 300 * time.Millisecond
	run := func(js jetstream.JetStream) (outcome, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		o := ackOutcome(js.PublishMsg(ctx, msg("s.a", nil)))
		return o, time.Since(start)
	}
	want, _ := run(js)
	got, took := run(jsfast.WrapJetStream(js))
	if !reflect.DeepEqual(want, got) || !got.Is["DeadlineExceeded"] {
		t.Fatalf("want nats.go's deadline error:\n nats.go %+v\n fast    %+v", want, got)
	}
	if took < deadline || took > deadline+3*time.Second {
		t.Fatalf("ended after %s, want at the %s deadline", took, deadline)
	}
}
