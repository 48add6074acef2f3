package replier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// job is one reply being processed.
type job struct {
	*stage.Delivery
	rep    *events.Reply
	client *molecule.Client
	key    string
	route  string
	// xTimeout is the X-Timeout of this job's next /a2a post, set by
	// roomToPost.
	xTimeout time.Duration
	// rec is the posting record of the post under way.
	rec events.ReplyRecord
	// direct: the dispatcher's stage runner in this process posts it in
	// the inbound message's slot (PostDirect), before any stream delivery. It never waits there: a
	// wait the stage would sit out is left to the stream's delivery.
	direct bool
	// marked: a direct post whose posting record is the dispatcher's
	// handled record (its posting mark, rec); none is in BucketReplies
	// until the sent record, or until an unknown outcome writes it.
	marked bool
	// unrecorded: a marked post may have reached the platform and no
	// record in BucketReplies says so (it could not be written). The reply
	// must not go to the stream, whose first delivery would post it again:
	// the runner retries the inbound message instead, and the
	// redelivery writes the posting record from the mark.
	unrecorded bool
	// refused: the platform refused a direct post for good. The reply
	// must not go to the stream, whose delivery would post it again: the
	// runner records the refusal and writes the dead letter
	// (DeadLetterDirect).
	refused bool
}

// steps is the replier's work on one delivery: its decode, then the
// chain every reply meets (chain), whether it came from the stream or from
// the dispatcher's stage runner in this process (PostDirect).
func (r *Replier) steps() stage.Step[*stage.Delivery] {
	return r.decoded(r.work)
}

// chain is the work on one decoded reply, in the order a reply meets it.
// Each step either returns how the reply is finished (the stage.Runner
// applies it, or PostDirect reports it) or passes it on.
func (r *Replier) chain() stage.Step[*job] {
	return stage.Steps(r.postFirst,
		r.routable, // a client for its workspace, and something to post
		r.recorded, // a redelivery follows its reply record: sent → ack, posting → resume
		r.budgeted, // the workspace's rate budget, shared with the heartbeat
		r.roomy,    // the start-margin rule
	)
	// then postFirst: the posting record, the POST, the sent record, the
	// turns in memory, the ack (post).
}

// decoded continues the publisher's trace, decodes the reply (malformed:
// dead letter) and makes it a job; the reply is finished in its trace.
func (r *Replier) decoded(next stage.Step[*job]) stage.Step[*stage.Delivery] {
	return func(runCtx context.Context, d *stage.Delivery) stage.Outcome {
		runCtx = tracing.Extract(runCtx, d.Msg.Headers())
		rep, err := events.DecodeReply(d.Msg.Data())
		if err != nil {
			d.FinishIn(runCtx)
			return stage.DeadLetter(events.ReasonMalformed, err)
		}
		runCtx, j, end := r.newJob(runCtx, d, rep, slog.Uint64("delivery", d.Meta.NumDelivered))
		defer end()
		d.FinishIn(runCtx)
		return next(runCtx, j)
	}
}

// newJob is the job of rep's delivery d, with its route and logger (which
// also names the delivery by which), and
// ctx in its "reply" span; end ends the span. The span starts as the
// delivery arrives, as the dispatcher's "handle" does: its start to the
// "post" span's is the time spent on the reply record (and the rate
// budget).
func (r *Replier) newJob(ctx context.Context, d *stage.Delivery, rep *events.Reply, which slog.Attr) (context.Context, *job, func()) {
	ctx, span := tracing.Start(ctx, "reply", trace.SpanKindConsumer,
		attribute.String("molecule.activity_id", rep.ActivityID), attribute.Int64("molecule.delivery", int64(d.Meta.NumDelivered)))
	j := &job{Delivery: d, rep: rep, key: events.ReplyKey(rep.WorkspaceID, rep.ActivityID), route: events.RouteNotify}
	j.WorkspaceID, j.ActivityID = rep.WorkspaceID, rep.ActivityID
	if rep.Source == events.SourcePeerAgent {
		j.route = events.RouteA2A
	}
	j.Log = tracing.Log(ctx, stage.MessageLogger(r.log, slog.String("workspace", rep.WorkspaceID), slog.String("activity", rep.ActivityID),
		slog.String("route", j.route), which))
	return ctx, j, func() { span.End() }
}

// routable dead-letters a reply this replier cannot post: no client
// (token) for its workspace, or nothing to say.
func (r *Replier) routable(next stage.Step[*job]) stage.Step[*job] {
	return func(runCtx context.Context, j *job) stage.Outcome {
		j.client = r.clients[j.rep.WorkspaceID]
		if j.client == nil && r.cfg.Lookup != nil {
			j.client = r.cfg.Lookup(j.rep.WorkspaceID)
		}
		if j.client == nil {
			return stage.DeadLetter(events.ReasonPermanent, fmt.Errorf("%w: %s", ErrNoClient, j.rep.WorkspaceID))
		}
		if j.rep.Text == "" && len(j.rep.Attachments) == 0 {
			return stage.DeadLetter(events.ReasonMalformed, fmt.Errorf("replier: reply to %s has neither text nor attachments", j.rep.ActivityID))
		}
		return next(runCtx, j)
	}
}

// recorded finishes a redelivered reply by its reply record, when there is
// one: sent → ack; posting → resume. A first delivery almost never finds
// a record, so it skips the read and lets the posting record's
// create-only write find one (postFirst); one that does has spent a
// rate-budget token for nothing.
func (r *Replier) recorded(next stage.Step[*job]) stage.Step[*job] {
	return func(runCtx context.Context, j *job) stage.Outcome {
		if j.Meta.NumDelivered <= 1 {
			return next(runCtx, j)
		}
		ctx, cancel := r.run.OpContext(runCtx)
		rec, rev, found, err := r.getRecord(ctx, j.key)
		cancel()
		switch {
		case err != nil:
			j.Log.WarnContext(ctx, "replier: reply record unreadable; retrying later", "error", err)
			return r.retry(j, 0, false, err)
		case !found:
			return next(runCtx, j)
		case rec.State == events.StateSent:
			return r.ackSent(runCtx, j)
		case rec.State != events.StatePosting:
			j.Log.WarnContext(ctx, "replier: reply record in an unknown state; treating it as posting", "state", rec.State)
		}
		return r.resume(runCtx, j, rec, rev)
	}
}

// budgeted holds the reply while the workspace's rate budget is at the
// reserve (docs/protocol.md §2: notify and a2a share the token's bucket
// with the heartbeat). The message is kept alive meanwhile; a stop hands
// it back. Under a deadline, a reply whose budget resets too late for a
// post to fit is handed back at once, delayed until the reset, instead of
// holding it (and the run) to the deadline.
func (r *Replier) budgeted(next stage.Step[*job]) stage.Step[*job] {
	return func(runCtx context.Context, j *job) stage.Outcome {
		for {
			d := j.client.TakeBudget(r.cfg.RateReserve)
			if d <= 0 {
				return next(runCtx, j)
			}
			if j.direct {
				// The dispatcher's slot does not wait for the window.
				return stage.Defer(d)
			}
			if _, ok := r.postFits(runCtx, j, d); !ok {
				j.Log.DebugContext(runCtx, "replier: rate budget at reserve until past the deadline; handing the reply back", "wait", d.Round(time.Millisecond))
				return stage.Defer(d)
			}
			if !r.sleepBudget(runCtx, j, d) {
				return stage.Defer(0)
			}
		}
	}
}

// roomy hands the reply back at once when its post cannot start under
// the start-margin rule (roomToPost).
func (r *Replier) roomy(next stage.Step[*job]) stage.Step[*job] {
	return func(runCtx context.Context, j *job) stage.Outcome {
		if !r.roomToPost(runCtx, j) {
			return stage.Defer(0)
		}
		return next(runCtx, j)
	}
}

// postFirst writes the posting record of a reply that has none, then
// posts it. A marked direct post has its posting record already: the
// dispatcher's handled record (PostDirect).
func (r *Replier) postFirst(runCtx context.Context, j *job) stage.Outcome {
	if j.marked {
		if time.Until(j.rec.Deadline) < r.cfg.NotifyTimeout/2 {
			// The handled record's create took most of the mark's time
			// (a slow store): a POST now could be cut mid-flight, its
			// outcome unknown. Nothing was posted: the stream posts it.
			return stage.Defer(0)
		}
		return r.post(runCtx, j, j.rec, 0)
	}
	now := time.Now().UTC()
	rec := events.ReplyRecord{State: events.StatePosting, Route: j.route, PostingAt: now, Deadline: now.Add(r.postTimeout(j)), Attempts: 1}
	ctx, cancel := r.run.OpContext(runCtx)
	rev, err := r.createRecord(ctx, j.key, rec)
	cancel()
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Sent already (a reply republished after a NATS restart comes
		// back as a first delivery): ack. Else another worker holds the
		// same reply (a redelivery raced us), or this one's own create
		// was retried after a lost answer: come back later, and the
		// redelivery follows the record.
		if j.Meta.NumDelivered == 1 && r.isSent(runCtx, j) {
			return r.ackSent(runCtx, j)
		}
		return r.retry(j, 0, false, err)
	}
	if err != nil {
		j.Log.WarnContext(ctx, "replier: posting record not written; retrying later", "error", err)
		return r.retry(j, 0, false, err)
	}
	return r.post(runCtx, j, rec, rev)
}
