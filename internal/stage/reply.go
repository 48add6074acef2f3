package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ReplyDelivery posts a reply without the reply stream, in the slot of the
// message that produced it: a replier in the same process
// (replier.Replier), given to the Runner in Config.Direct by the process
// that wires the stages (internal/relay). The Runner hands it the replies
// it carries (Deliver) that qualify (postsDirectly).
type ReplyDelivery interface {
	// DirectPostDeadline is the deadline of the posting mark a handled
	// record stored at now carries.
	DirectPostDeadline(now time.Time) time.Time
	// PostDirect posts reply (an encoded events.Reply) with mark, the
	// posting mark of its handled record, as the replier stage would on
	// its first delivery, and returns that stage's outcome: Ack when the
	// reply was posted and recorded sent, Abandon at a crash point; any
	// other with publish when the reply is to be published to the reply
	// stream; without publish, DeadLetter when the platform refused it for
	// good (published, it would be posted again), else a post that may have
	// reached the platform and that only the mark records (the message is
	// retried: its redelivery writes the posting record from the mark).
	// progress keeps the carrying message alive during the POST.
	PostDirect(ctx context.Context, reply []byte, mark events.PostingMark, progress func()) (o Outcome, publish bool)
	// DeadLetterDirect writes the replier's dead letter of a reply whose
	// direct post was refused for good (dlq.OfDirectPost).
	DeadLetterDirect(ctx context.Context, workspaceID, activityID string, reply []byte, refusal events.Refusal) error
}

// Reply is what a message's step leaves the Runner to deliver before the
// message is acked (Deliver): the handled record of an inbound message,
// already stored, and the reply it holds, if any.
type Reply struct {
	In *events.Inbound
	// Record is the handled record stored in Handled under Key at Rev.
	// Rev 0: a redelivery found it there (it was stored before), and its
	// reply is republished, never posted directly.
	Record  events.HandledRecord
	Rev     uint64
	Handled jetstream.KeyValue
	Key     string
	// Replies is the replies bucket, where a redelivery writes the posting
	// record a posting mark stands for. If nil, it is opened when needed.
	Replies jetstream.KeyValue
	// Lost is Ack's: what a redelivery finds should the ack be lost.
	Lost string
	// Delivered, when set, is called once the reply is delivered, before
	// the ack (the step's counting and logging).
	Delivered func(ctx context.Context)
}

// Deliver acks the message once the Runner delivered rep's reply: it
// posts it through Config.Direct when the reply qualifies (a direct post,
// its posting mark set by MarkDirect), else publishes it to the reply
// stream; a reply the platform refused for good is recorded refused, then
// dead-lettered. A failure retries the message.
func Deliver(rep Reply) Outcome { return Outcome{kind: outcomeDeliver, reply: &rep} }

// MarkDirect gives rec, the handled record of in's reply about to be
// stored at now, the posting mark of its direct post when the Runner
// posts it directly (Deliver): the record is then that post's posting
// record, one write fewer than a posting record of its own.
func (r *Runner) MarkDirect(rec *events.HandledRecord, d *Delivery, in *events.Inbound, now time.Time) {
	if r.postsDirectly(d, in) {
		rec.DirectPostingAt, rec.DirectDeadline = now, r.cfg.Direct.DirectPostDeadline(now)
	}
}

// postsDirectly says whether in's reply is posted through Config.Direct.
// Only a canvas reply is: a notify takes milliseconds, while an /a2a
// reply to a push-mode peer waits for the peer's agent, up to
// MOLECULE_A2A_TIMEOUT (10 minutes), and would hold this slot that long;
// it goes through the reply stream and the replier's own slots. Nor is the
// reply of a dead letter's replay: its reply may have been posted before
// the message was dead-lettered, and a marked direct post reads no reply
// record, while the replier stage's finds it sent.
func (r *Runner) postsDirectly(d *Delivery, in *events.Inbound) bool {
	return r.cfg.Direct != nil && in.Source != events.SourcePeerAgent && !(d.Msg != nil && dlq.IsReplay(d.Msg.Headers()))
}

// deliver delivers rep's reply and returns the message's outcome: Ack
// once it is delivered (rep.Delivered called), else what stopped it.
func (r *Runner) deliver(runCtx context.Context, d *Delivery, rep *Reply) Outcome {
	var o Outcome
	switch {
	case rep.Rev == 0:
		o = r.redeliver(runCtx, d, rep)
	case len(rep.Record.Reply) == 0:
		o = r.published(runCtx, rep)
	case r.postsDirectly(d, rep.In):
		o = r.postDirect(runCtx, d, rep)
	default:
		o = r.publish(runCtx, d, rep)
	}
	if o.kind == outcomeAck && rep.Delivered != nil {
		rep.Delivered(runCtx)
	}
	return o
}

// published is the end of a reply's publish (or of a record without
// one): its crash point, then the ack.
func (r *Runner) published(runCtx context.Context, rep *Reply) Outcome {
	if crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterReplyPublish, rep.In) {
		return Abandon()
	}
	return Ack(rep.Lost)
}

// postDirect posts the reply through Config.Direct in this slot, with the
// handled record's posting mark, and follows what it says: delivered,
// published, retried, or refused for good.
func (r *Runner) postDirect(runCtx context.Context, d *Delivery, rep *Reply) Outcome {
	posted, publish := r.cfg.Direct.PostDirect(runCtx, rep.Record.Reply, rep.Record.Mark(), d.Progress)
	// The writes after the POST get their own time, not what the POST
	// left of the handled record's.
	ctx, cancel := r.OpContext(runCtx)
	defer cancel()
	switch {
	case posted.kind == outcomeAbandon:
		return Abandon()
	case posted.kind == outcomeAck:
		return Ack(rep.Lost)
	case crashpoint.Hit(runCtx, crashpoint.DispatcherOf(runCtx).AfterDirectPost, rep.In):
		return Abandon()
	case posted.kind == outcomeDeadLetter && !publish:
		return r.refused(runCtx, ctx, d, rep, events.Refusal{Reason: posted.reason, Error: errorText(posted.cause), At: time.Now().UTC()})
	case !publish:
		r.logOf(d).ErrorContext(ctx, r.target.Stage+": direct post may have reached the platform and is not recorded; its redelivery records it from the handled record, then publishes")
		return Retry(0)
	}
	return r.publish(runCtx, d, rep)
}

// refused finishes a reply whose direct post the platform refused for
// good: it records the refusal in the handled record (an update at
// rep.Rev), then writes the dead letter the replier stage would have
// written; the message is then acked. Published, the reply would be
// posted again by the replier stage, and refused again. A redelivery
// after the record writes the dead letter and posts nothing (redeliver);
// before it (the refusal not recorded), it can only post through the
// stream again, the refusal leaving nothing on the platform's feed.
func (r *Runner) refused(runCtx, ctx context.Context, d *Delivery, rep *Reply, refusal events.Refusal) Outcome {
	log, hooks := r.logOf(d), crashpoint.DispatcherOf(runCtx)
	rep.Record.ReplyRefused = &refusal
	data, err := rep.Record.Marshal()
	if err == nil {
		err = RetryRequest(ctx, func(ctx context.Context) error {
			_, err := rep.Handled.Update(ctx, rep.Key, data, rep.Rev)
			return err
		})
	}
	if err != nil {
		log.ErrorContext(ctx, r.target.Stage+": refused direct post not recorded; retrying the message, whose redelivery publishes the reply (or writes its dead letter if the record was written)", "error", err)
		return Retry(0)
	}
	if crashpoint.Hit(runCtx, hooks.AfterRefusalRecord, rep.In) {
		return Abandon()
	}
	if err := r.deadLetterRefused(ctx, rep); err != nil {
		log.ErrorContext(ctx, r.target.Stage+": dead letter of a refused direct post not written; retrying the message, whose redelivery writes it", "error", err)
		return Retry(0)
	}
	if crashpoint.Hit(runCtx, hooks.AfterRefusalDeadLetter, rep.In) {
		return Abandon()
	}
	return Ack(rep.Lost)
}

// redeliver finishes a message whose handled record an earlier delivery
// stored: the dead letter of a refused direct post (again: the same
// Nats-Msg-Id), or the recorded reply republished (its Nats-Msg-Id makes
// a second copy within the duplicate window harmless, and after it the
// replier's record stops a second post), after the posting record its
// posting mark stands for.
func (r *Runner) redeliver(runCtx context.Context, d *Delivery, rep *Reply) Outcome {
	rec, log := rep.Record, r.logOf(d)
	ctx, cancel := r.OpContext(runCtx)
	defer cancel()
	switch {
	case rec.ReplyRefused != nil:
		if err := r.deadLetterRefused(ctx, rep); err != nil {
			log.ErrorContext(ctx, r.target.Stage+": dead letter of a refused direct post not written; retrying", "error", err)
			return Retry(0)
		}
	case len(rec.Reply) > 0:
		if mark := rec.Mark(); !mark.IsZero() {
			if err := r.recordMark(ctx, rep, mark); err != nil {
				log.ErrorContext(ctx, r.target.Stage+": posting record of a direct post not written from the handled record's mark; retrying before republishing", "error", err)
				return Retry(0)
			}
		}
		if err := r.publishReply(ctx, rep); err != nil {
			log.ErrorContext(ctx, r.target.Stage+": republish of recorded reply failed; retrying", "error", err)
			return Retry(0)
		}
	}
	return r.published(runCtx, rep)
}

// deadLetterRefused writes the dead letter of the refused direct post
// that rep's record holds (ReplyRefused), through Config.Direct, which
// counts it, or, in a process without it (a redelivery that reached a
// dispatcher run alone), itself.
func (r *Runner) deadLetterRefused(ctx context.Context, rep *Reply) error {
	ws, act, rec := rep.In.WorkspaceID, rep.In.ActivityID, rep.Record
	if r.cfg.Direct != nil {
		return r.cfg.Direct.DeadLetterDirect(ctx, ws, act, rec.Reply, *rec.ReplyRefused)
	}
	return dlq.Publish(ctx, r.js, dlq.OfDirectPost(ws, act, rec.Reply, *rec.ReplyRefused))
}

// recordMark creates, from the handled record's posting mark, the posting
// record a direct post of the reply stands on (events.PostingMark.Record):
// the earlier delivery may have died before or after its POST, and the
// replier stage's delivery of the republished reply must settle it
// against the feed, not post it blind. A record that exists (the reply was
// recorded sent, or the direct post wrote it after an unknown outcome) is
// left as it is.
func (r *Runner) recordMark(ctx context.Context, rep *Reply, mark events.PostingMark) error {
	kv := rep.Replies
	if kv == nil {
		var err error
		if kv, err = r.js.KeyValue(ctx, events.BucketReplies); err != nil {
			return fmt.Errorf("open bucket %s: %w", events.BucketReplies, err)
		}
	}
	data, err := mark.Record().Marshal()
	if err != nil {
		return err
	}
	_, err = RetryCreate(ctx, kv, events.ReplyKey(rep.In.WorkspaceID, rep.In.ActivityID), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	return err
}

// publish publishes the reply to the reply stream, then acks.
func (r *Runner) publish(runCtx context.Context, d *Delivery, rep *Reply) Outcome {
	ctx, cancel := r.OpContext(runCtx)
	defer cancel()
	if err := r.publishReply(ctx, rep); err != nil {
		r.logOf(d).ErrorContext(ctx, r.target.Stage+": reply publish failed; will republish on redelivery", "error", err)
		return Retry(0)
	}
	return r.published(runCtx, rep)
}

// publishReply publishes the reply with a Nats-Msg-Id derived from its
// activity id and waits for the stream's acknowledgement.
func (r *Runner) publishReply(ctx context.Context, rep *Reply) error {
	ws, act := rep.In.WorkspaceID, rep.In.ActivityID
	m := &nats.Msg{Subject: events.ReplySubject(ws), Data: rep.Record.Reply, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, events.ReplyMsgID(ws, act))
	ctx, span := tracing.Start(ctx, "reply-publish", trace.SpanKindProducer)
	defer span.End()
	tracing.Inject(ctx, m.Header)
	err := RetryRequest(ctx, func(ctx context.Context) error {
		_, err := r.js.PublishMsg(ctx, m)
		return err
	})
	if err == nil && r.cfg.OnReply != nil {
		r.cfg.OnReply()
	}
	return err
}

// logOf is d's logger, or the stage's before the stage named it.
func (r *Runner) logOf(d *Delivery) *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return r.log
}
