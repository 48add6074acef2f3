package replier

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// firstDelivery is what a direct post counts as: the reply's first
// delivery, which reads no record before its posting record's create.
var firstDelivery = jetstream.MsgMetadata{NumDelivered: 1}

// The replier is the stage runner's reply delivery in a process that runs
// both stages: the dispatcher's runner hands it the canvas replies it
// carries (stage.Deliver), which are posted in the inbound message's slot
// instead of going through the reply stream (docs/architecture.md,
// "Direct posting").
var _ stage.ReplyDelivery = (*Replier)(nil)

// PostDirect posts reply (an encoded events.Reply) at once, in the
// caller's goroutine, as the stage would on its first delivery of it
// (chain: route, rate budget, posting record, POST, sent record, turns in
// memory: work), and returns the outcome the stage would have applied,
// with publish as stage.ReplyDelivery says.
//
// mark, when set (a notify only), is the posting mark the caller's handled
// record carries (events.HandledRecord.Mark, its deadline from
// DirectPostDeadline): that record is the reply's posting record, so
// PostDirect writes none before the POST, only the sent record after it
// (or, when the POST's outcome is unknown, the posting record the mark
// stands for, for the stream's delivery to settle). The POST ends by the
// mark's deadline. Without a mark the posting record is written first, as
// the stage does.
//
// A reply not known to be delivered is published (publish), and the
// stage's delivery follows whatever record this attempt left, as for a
// redelivery; a marked POST that may have reached the platform, whose
// record could not be written, is not (the inbound message is retried and
// its redelivery writes the posting record from the mark), nor is one the
// platform refused for good (DeadLetter: the caller records the refusal,
// then has DeadLetterDirect write the dead letter the stream would have
// written). It never waits for the rate budget or for a post in flight to
// settle: those are left to the stream. ctx is the caller's message's: its
// trace, its deadline, its crash points (crashpoint.Dispatcher.Direct);
// progress keeps the caller's message alive during the POST.
func (r *Replier) PostDirect(ctx context.Context, reply []byte, mark events.PostingMark, progress func()) (o stage.Outcome, publish bool) {
	rep, err := events.DecodeReply(reply)
	if err != nil {
		r.stats.directFallbacks.Add(1)
		return stage.DeadLetter(events.ReasonMalformed, err), true
	}
	meta := firstDelivery
	d := &stage.Delivery{Meta: &meta, Progress: progress}
	ctx, j, end := r.newJob(crashpoint.Direct(ctx), d, rep, slog.Bool("direct", true))
	defer end()
	j.direct = true
	if !mark.IsZero() && j.route == events.RouteNotify {
		j.marked, j.rec = true, mark.Record()
	}
	o = r.work(ctx, j)
	switch {
	case o.Acked():
		r.stats.direct.Add(1)
	case j.refused:
		r.stats.directRefused.Add(1)
	case !o.Abandoned():
		r.stats.directFallbacks.Add(1)
		j.Log.DebugContext(ctx, "replier: direct post left to the reply stream", "outcome", o.String(), "unrecorded", j.unrecorded)
	}
	return o, !o.Acked() && !o.Abandoned() && !j.unrecorded && !j.refused
}

// DeadLetterDirect writes the dead letter of a reply (encoded, of
// workspaceID and activityID) whose direct post the platform refused for
// good (PostDirect's DeadLetter without publish): the one the replier
// stage would have written (dlq.OfDirectPost), replayable the same way.
// The caller has recorded the refusal first (events.HandledRecord's
// ReplyRefused), so that a redelivery of its message calls this again
// instead of posting the reply; the dead letter's stable Nats-Msg-Id
// drops that second copy. A dead letter stored counts in
// Stats.DeadLettered.
func (r *Replier) DeadLetterDirect(ctx context.Context, workspaceID, activityID string, reply []byte, refusal events.Refusal) error {
	seq, stored, err := dlq.PublishStored(ctx, r.js, dlq.OfDirectPost(workspaceID, activityID, reply, refusal))
	if err != nil || !stored {
		return err
	}
	r.stats.directDeadLettered.Add(1)
	r.log.WarnContext(ctx, "replier: refused direct post dead-lettered", "workspace", workspaceID, "activity", activityID, "reason", refusal.Reason, "direct", true,
		"dlq_seq", seq, "action", dlq.Action(seq))
	return nil
}

// DirectPostDeadline is when a direct notify marked at now (the posting
// mark of the caller's handled record) stops being in flight: now plus
// the notify timeout.
func (r *Replier) DirectPostDeadline(now time.Time) time.Time { return now.Add(r.cfg.NotifyTimeout) }
