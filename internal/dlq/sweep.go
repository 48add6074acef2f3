package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A message whose stage died (or hung past AckWait) on every delivery hits
// the consumer's MaxDeliver without ever being acked or terminated. The
// server stops delivering it but a work-queue stream keeps it for good. The
// sweep copies such messages into the dead-letter stream, then deletes them
// from the work queue.
//
// Two detectors, both idempotent (the dead-letter publish is de-duplicated
// on MsgID, the delete tolerates a message already gone):
//   - the server's advisory $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>,
//     received on a queue subscription so one worker handles each; it is
//     only seen by a process that is subscribed when it fires;
//   - a scan for when nobody heard the advisory (a Lambda drain, say). In a
//     work-queue stream an acked message is deleted, so a stored message
//     the consumer has already delivered is either pending (awaiting ack or
//     redelivery, counted in NumAckPending) or dead. When the consumer has
//     nothing pending, every stored message up to its delivered sequence is
//     dead; so is one at or below the ack floor. (The server does not move
//     the ack floor past a max-delivered message reliably — observed on
//     nats-server 2.15 — so the floor alone is not enough.) With messages
//     pending the scan cannot tell the dead from the pending and leaves
//     them to a quieter moment or to the advisory. An ack is recorded
//     before the stream deletes the message, so a candidate is only moved
//     if it is still stored after a grace period.

// advisoryPrefix is the subject prefix of max-deliveries advisories.
const advisoryPrefix = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"

// sweepQueue is the queue group of the advisory subscription.
const sweepQueue = "molecule-relay-sweep"

// SweepGrace is how long a scan candidate must stay stored before it is
// moved (see the scan above).
var SweepGrace = time.Second

// ErrorMaxDeliveriesUnacked is the Error of a swept dead letter.
const ErrorMaxDeliveriesUnacked = "delivery limit reached without an acknowledgement: the stage crashed, hung or lost its connection on every delivery"

// DispatcherTarget is the inbound stream and the dispatcher's consumer.
func DispatcherTarget(t *events.Topology) events.StageQueue {
	return events.StageQueue{Stage: events.StageDispatcher, Stream: t.Inbound, Consumer: t.Dispatcher}
}

// ReplierTarget is the reply stream and the replier's consumer.
func ReplierTarget(t *events.Topology) events.StageQueue {
	return events.StageQueue{Stage: events.StageReplier, Stream: t.Reply, Consumer: t.Replier}
}

// queueNames are the names of t's stream and consumer, from their cached
// info.
func queueNames(t events.StageQueue) (stream, consumer string) {
	if si := t.Stream.CachedInfo(); si != nil {
		stream = si.Config.Name
	}
	if ci := t.Consumer.CachedInfo(); ci != nil {
		consumer = ci.Name
	}
	return stream, consumer
}

// maxDeliveryAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver event the sweep needs.
type maxDeliveryAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// EnvelopeOf returns data as a DeadLetter envelope: data itself when it is
// valid JSON, otherwise data as a JSON string (the dead letter must stay
// valid JSON; replaying such an envelope republishes the string).
func EnvelopeOf(data []byte) json.RawMessage {
	if json.Valid(data) {
		return json.RawMessage(data)
	}
	b, _ := json.Marshal(string(data))
	return b
}

// activityOf reads the activity id of an envelope, best effort.
func activityOf(data []byte) string {
	var e struct {
		ActivityID string `json:"activity_id"`
	}
	_ = json.Unmarshal(data, &e)
	return e.ActivityID
}

// WorkspaceOfSubject returns the last token of a molecule.<kind>.<ws>
// subject.
func WorkspaceOfSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// move copies the stored message seq into the dead-letter stream, then
// deletes it from the work queue, and returns the dead letter's sequence.
// A message already gone is not an error (0: nothing moved).
func move(ctx context.Context, js jetstream.JetStream, t events.StageQueue, seq, deliveries uint64) (dlqSeq uint64, err error) {
	m, err := t.Stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("dlq: sweep read %d: %w", seq, err)
	}
	stream, _ := queueNames(t)
	dl := events.DeadLetter{
		Stage:           t.Stage,
		WorkspaceID:     WorkspaceOfSubject(m.Subject),
		ActivityID:      activityOf(m.Data),
		Reason:          events.ReasonMaxDeliveries,
		Error:           ErrorMaxDeliveriesUnacked,
		Deliveries:      deliveries,
		OriginalSubject: m.Subject,
		OriginalStream:  stream,
		OriginalSeq:     seq,
		Envelope:        EnvelopeOf(m.Data),
	}
	dlqSeq, _, err = PublishStored(ctx, js, dl)
	if err != nil {
		return 0, err
	}
	if err := deleteIfPresent(ctx, t.Stream, seq); err != nil {
		return 0, fmt.Errorf("dlq: sweep delete %d from %s: %w", seq, stream, err)
	}
	return dlqSeq, nil
}

// SweepOnce scans the target's stream for messages that hit MaxDeliver
// without an acknowledgement and moves them to the dead-letter stream (see
// the scan above: it finds them when the consumer has nothing pending). It
// makes one consumer-info call; when it finds candidates it waits
// SweepGrace before moving them. It returns how many it moved.
func SweepOnce(ctx context.Context, js jetstream.JetStream, t events.StageQueue) (int, error) {
	info, err := t.Consumer.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("dlq: sweep consumer info: %w", err)
	}
	floor := info.AckFloor.Stream
	if info.NumAckPending == 0 {
		floor = max(floor, info.Delivered.Stream)
	}
	if floor == 0 {
		return 0, nil
	}
	filter := info.Config.FilterSubject
	if filter == "" {
		filter = ">"
	}
	var candidates []uint64
	for seq := uint64(1); seq <= floor; {
		m, err := t.Stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("dlq: sweep scan at %d: %w", seq, err)
		}
		if m.Sequence > floor {
			break
		}
		candidates = append(candidates, m.Sequence)
		seq = m.Sequence + 1
	}
	if len(candidates) == 0 {
		return 0, nil
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(SweepGrace):
	}
	deliveries := uint64(info.Config.MaxDeliver)
	n := 0
	for _, seq := range candidates {
		dlqSeq, err := move(ctx, js, t, seq, deliveries)
		if err != nil {
			return n, err
		}
		if dlqSeq != 0 {
			n++
		}
	}
	return n, nil
}

// Sweeper moves max-delivered messages of one target into the dead-letter
// stream while it runs (see SweepMaxDeliveries).
type Sweeper struct {
	js     jetstream.JetStream
	target events.StageQueue
	logger *slog.Logger
	sub    *nats.Subscription
}

// StartSweeper subscribes to the target's max-deliveries advisories (queue
// group, so one worker handles each) and returns a running Sweeper; stop it
// with Stop. Each advisory's message is moved to the dead-letter stream.
// logger names the stage already (a stage.Runner's does): the sweeper
// adds no "stage" of its own, which would show twice on every line.
func StartSweeper(js jetstream.JetStream, t events.StageQueue, logger *slog.Logger) (*Sweeper, error) {
	if logger == nil {
		logger = slog.Default()
	}
	stream, consumer := queueNames(t)
	if stream == "" || consumer == "" {
		return nil, fmt.Errorf("dlq: sweep target lacks stream or consumer info")
	}
	s := &Sweeper{js: js, target: t, logger: logger}
	subject := advisoryPrefix + "." + stream + "." + consumer
	sub, err := js.Conn().QueueSubscribe(subject, sweepQueue, s.onAdvisory)
	if err != nil {
		return nil, fmt.Errorf("dlq: subscribe %s: %w", subject, err)
	}
	s.sub = sub
	return s, nil
}

func (s *Sweeper) onAdvisory(msg *nats.Msg) {
	var adv maxDeliveryAdvisory
	if err := json.Unmarshal(msg.Data, &adv); err != nil || adv.StreamSeq == 0 {
		s.logger.Warn("dlq: unreadable max-deliveries advisory", "error", err)
		return
	}
	// Work off the subscription's goroutine so a slow write does not hold
	// up later advisories.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dlqSeq, err := move(ctx, s.js, s.target, adv.StreamSeq, adv.Deliveries)
		if err != nil {
			s.logger.Warn("dlq: sweep of max-delivered message failed; the periodic scan will retry", "seq", adv.StreamSeq, "error", err)
			return
		}
		if dlqSeq != 0 {
			s.logger.Warn("dlq: message exhausted its deliveries without an ack; moved to the dead-letter stream", "seq", adv.StreamSeq, "deliveries", adv.Deliveries,
				"dlq_seq", dlqSeq, "action", Action(dlqSeq))
		}
	}()
}

// Stop unsubscribes.
func (s *Sweeper) Stop() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
}

// SweepMaxDeliveries runs until ctx ends: it listens to the target's
// max-deliveries advisories and moves each message they name into the
// dead-letter stream, and scans with SweepOnce at start and every interval
// (if not set, 1 minute) for messages whose advisory nobody heard. It
// returns nil when ctx ends.
func SweepMaxDeliveries(ctx context.Context, js jetstream.JetStream, t events.StageQueue, interval time.Duration, logger *slog.Logger) error {
	if interval <= 0 {
		interval = time.Minute
	}
	if logger == nil {
		logger = slog.Default()
	}
	sw, err := StartSweeper(js, t, logger)
	if err != nil {
		return err
	}
	defer sw.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if n, err := SweepOnce(ctx, js, t); err != nil && ctx.Err() == nil {
			logger.Warn("dlq: sweep scan failed", "error", err)
		} else if n > 0 {
			logger.Warn("dlq: moved max-delivered messages to the dead-letter stream", "count", n, "action", "inspect them with `molecule-relay dlq list`")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
