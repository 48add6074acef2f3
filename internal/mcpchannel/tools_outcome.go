package mcpchannel

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// refusalGrace is how long, after the replier dropped a reply's posting
// record, a tool waits for the dead letter that follows a permanent
// refusal before it concludes the refusal was for now (the replier
// drops the record in both cases, and writes the dead letter right after
// in the permanent one).
const refusalGrace = 2 * time.Second

// Outcomes of a posted reply, as a tool learns them.
const (
	// outcomePending: nothing durable said yet (postWait ran out).
	outcomePending = iota
	// outcomeSent: the platform accepted the reply.
	outcomeSent
	// outcomeRefused: the platform refused it for good; it is
	// dead-lettered.
	outcomeRefused
	// outcomeRetrying: the platform refused it for now, or answered with
	// an error that leaves it unknown; the relay retries.
	outcomeRetrying
)

// replyOutcome is what became of a reply within postWait.
type replyOutcome struct {
	kind int
	// reason is the dead letter's error (the platform's reason and what to
	// do) when refused.
	reason string
}

// awaitReply waits, up to postWait, for the first durable word on the
// reply of activity of ws: its reply record sent, its dead letter (the
// replier stage's, or the dispatcher's direct post's refusal in the
// handled record, written before its dead letter), or the replier giving
// the post back for a retry. since is when the reply was handed over: no
// dead letter of it can be older.
func awaitReply(ctx context.Context, be Backend, ws, activity string, since time.Time) replyOutcome {
	ctx, cancel := context.WithTimeout(ctx, postWait)
	defer cancel()
	out := make(chan replyOutcome, 4)
	say := func(o replyOutcome) {
		select {
		case out <- o:
		default:
		}
	}
	dropped := make(chan struct{}, 1)
	go watchKey(ctx, be.Replies, events.ReplyKey(ws, activity), func(e jetstream.KeyValueEntry) {
		var r events.ReplyRecord
		switch {
		case e.Operation() != jetstream.KeyValuePut:
			select {
			case dropped <- struct{}{}:
			default:
			}
		case json.Unmarshal(e.Value(), &r) != nil:
		case r.State == events.StateSent:
			say(replyOutcome{kind: outcomeSent})
		case !r.AnsweredAt.IsZero():
			say(replyOutcome{kind: outcomeRetrying})
		}
	})
	if be.Handled != nil {
		go watchKey(ctx, be.Handled, events.HandledKey(ws, activity), func(e jetstream.KeyValueEntry) {
			var h events.HandledRecord
			if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &h) == nil && h.ReplyRefused != nil {
				say(replyOutcome{kind: outcomeRefused, reason: h.ReplyRefused.Error})
			}
		})
	}
	if be.rt != nil {
		go watchDeadLetter(ctx, be.rt.Conn.JS, ws, activity, since, func(reason string) {
			say(replyOutcome{kind: outcomeRefused, reason: reason})
		})
	}
	var grace <-chan time.Time
	for {
		select {
		case o := <-out:
			return o
		case <-dropped:
			if grace == nil {
				grace = time.After(refusalGrace)
			}
		case <-grace:
			return replyOutcome{kind: outcomeRetrying}
		case <-ctx.Done():
			return replyOutcome{kind: outcomePending}
		}
	}
}

// watchKey calls fn with every update of key in kv (its current value
// first) until ctx ends.
func watchKey(ctx context.Context, kv jetstream.KeyValue, key string, fn func(jetstream.KeyValueEntry)) {
	if kv == nil {
		return
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, open := <-w.Updates():
			if !open {
				return
			}
			if e != nil {
				fn(e)
			}
		}
	}
}

// watchDeadLetter calls found with the error of the replier's dead letter
// of activity of ws, stored since since, if one comes before ctx ends.
func watchDeadLetter(ctx context.Context, js jetstream.JetStream, ws, activity string, since time.Time, found func(reason string)) {
	start := since.Add(-time.Second) // the stream's clock against ours
	c, err := js.OrderedConsumer(ctx, events.StreamDLQ, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.DLQSubject(events.StageReplier, ws)},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return
	}
	it, err := c.Messages()
	if err != nil {
		return
	}
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			return
		}
		var dl events.DeadLetter
		if json.Unmarshal(m.Data(), &dl) == nil && dl.ActivityID == activity {
			found(dl.Error)
			return
		}
	}
}
