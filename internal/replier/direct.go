package replier

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/events"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
)

// firstDelivery is what a direct post counts as: the reply's first
// delivery, which reads no record before its posting record's create.
var firstDelivery = jetstream.MsgMetadata{NumDelivered: 1}

// PostDirect posts reply (an encoded events.Reply) at once, in the
// caller's goroutine, as the stage would on its first delivery of it
// (chain: route, rate budget, posting record, POST, sent record, turns in
// memory: work), and returns the outcome the stage would have applied. A
// dispatcher in the same process calls it for a canvas reply after
// storing its handled record, instead of publishing the reply to the
// reply stream (docs/architecture.md, "Direct posting"; a peer reply's
// /a2a may wait minutes and goes through the stream).
//
// Ack means the reply was posted and recorded sent (or found sent): the
// caller acks its inbound message and publishes nothing. Abandon means a
// crash point stopped it (tests only): the caller must stop too. Any other
// outcome means the reply is not known to be delivered: the caller
// publishes it to the reply stream as usual, and the stage's delivery
// follows whatever record this attempt left, as for a redelivery. The
// caller never waits here for the rate budget or for a post in flight to
// settle: those are left to the stream. ctx is the caller's message's:
// its trace, its deadline, its crash points (crashpoint.Dispatcher.Direct);
// progress keeps the caller's message alive during the POST.
func (r *Replier) PostDirect(ctx context.Context, reply []byte, progress func()) stage.Outcome {
	rep, err := events.DecodeReply(reply)
	if err != nil {
		r.stats.directFallbacks.Add(1)
		return stage.DeadLetter(events.ReasonMalformed, err)
	}
	meta := firstDelivery
	d := &stage.Delivery{Meta: &meta, Progress: progress}
	ctx, j, end := r.newJob(crashpoint.Direct(ctx), d, rep, slog.Bool("direct", true))
	defer end()
	j.direct = true
	o := r.work(ctx, j)
	switch {
	case o.Acked():
		r.stats.direct.Add(1)
	case !o.Abandoned():
		r.stats.directFallbacks.Add(1)
		j.Log.DebugContext(ctx, "replier: direct post left to the reply stream", "outcome", o.String())
	}
	return o
}
