package delegate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Routing outcomes of an inbound message.
type Outcome int

const (
	// NotAnAnswer: the message answers no question of this workspace; it
	// takes the ordinary path to the handler.
	NotAnAnswer Outcome = iota
	// Stored: the answer is in its ask record now; ack the message.
	Stored
	// Duplicate: the record already holds this answer (a redelivery, or
	// the peer posted it twice); ack the message.
	Duplicate
	// Unawaited: nobody waits for this answer any more; dead-letter the
	// message with events.ReasonUnawaitedAnswer and the returned error.
	Unawaited
)

// ErrUnawaited explains an Unawaited outcome.
var ErrUnawaited = errors.New("delegate: answer to a question nobody waits for")

// MayBeAnswer says whether Route could find in to be an answer: a peer's
// message naming a message it replies to, or a peer's message/send that
// carries no relay metadata at all (no hop count, no in_reply_to: a peer
// that is not a relay), with an asks bucket to look it up in. A relay's
// own question (relay_hops set) is never taken for an answer. False:
// Route returns NotAnAnswer without a request, so a caller can skip
// setting one up.
func MayBeAnswer(asks jetstream.KeyValue, in *events.Inbound) bool {
	if asks == nil || in.Source != events.SourcePeerAgent {
		return false
	}
	return in.InReplyToMessageID != "" || unaddressed(in)
}

// unaddressed: a peer's message/send with none of a relay's metadata.
func unaddressed(in *events.Inbound) bool {
	return in.InReplyTo == "" && in.Hops == 0 && (in.Method == "message/send" || in.Method == "")
}

// Route decides whether in is a peer's answer to a question of its
// workspace and, if the question is still awaited, stores the answer in
// the question's record (compare-and-set, idempotent). An answer is
// matched, in this order: by metadata.in_reply_to_message_id (a relay's
// answer; it must name a question asked of that very peer); else, for a
// peer that sets none of our metadata, by the awaiting list of that
// peer (routeUnaddressed: the oldest question awaited, or the oldest in
// the contextId the answer echoes). It is called by the dispatcher
// before the handled-record lookup. handled is the dispatcher's handled
// bucket: a question whose asking message already finished is no longer
// awaited. An error means "unsure": retry the message later.
func Route(ctx context.Context, asks, handled jetstream.KeyValue, in *events.Inbound) (Outcome, error) {
	switch {
	case !MayBeAnswer(asks, in):
		return NotAnAnswer, nil
	case in.InReplyToMessageID == "":
		return routeUnaddressed(ctx, asks, handled, in)
	}
	return store(ctx, asks, handled, events.AskKey(in.WorkspaceID, in.InReplyToMessageID), in, true)
}

// store stores in as the answer in the record at key, if it is still
// awaited. addressed: in named the question itself, so an answer nobody
// waits for any more is Unawaited (dead letter); an answer matched by
// the awaiting list may be a new message after all, and is then
// NotAnAnswer.
func store(ctx context.Context, asks, handled jetstream.KeyValue, key string, in *events.Inbound, addressed bool) (Outcome, error) {
	for range maxCAS {
		rec, rev, err := loadRecord(ctx, asks, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return NotAnAnswer, nil
		case err != nil:
			return NotAnAnswer, err
		case rec.Peer != in.SourceWorkspaceID:
			// Another workspace names our question: not its answer.
			return NotAnAnswer, nil
		}
		if out, err := unawaited(ctx, handled, rec, in); out != NotAnAnswer || err != nil {
			if out == Unawaited && !addressed {
				return NotAnAnswer, nil
			}
			return out, err
		}
		rec.State = events.AskAnswered
		rec.Answer = &events.AskAnswer{Text: in.Text, Attachments: in.Attachments,
			ActivityID: in.ActivityID, MessageID: in.MessageID, At: time.Now().UTC()}
		if err = writeRecord(ctx, asks, key, rec, rev); err == nil {
			return Stored, nil
		} else if !isConflict(err) {
			return NotAnAnswer, err
		}
	}
	return NotAnAnswer, fmt.Errorf("delegate: ask record %s kept changing", key)
}

// unawaited says what to do with an answer whose record is not pending,
// or whose asking message finished: NotAnAnswer means "store it".
func unawaited(ctx context.Context, handled jetstream.KeyValue, rec *events.AskRecord, in *events.Inbound) (Outcome, error) {
	switch rec.State {
	case events.AskAnswered:
		if a := rec.Answer; a != nil && (a.ActivityID == in.ActivityID || in.MessageID != "" && a.MessageID == in.MessageID) {
			return Duplicate, nil
		}
		return Unawaited, fmt.Errorf("%w: question %s already has an answer", ErrUnawaited, rec.MessageID)
	case events.AskAbandoned:
		return Unawaited, fmt.Errorf("%w: the handler of activity %s stopped waiting for question %s at %s",
			ErrUnawaited, rec.Activity, rec.MessageID, rec.Deadline.Format(time.RFC3339))
	}
	_, err := handled.Get(ctx, events.HandledKey(rec.Workspace, rec.Activity))
	switch {
	case err == nil:
		return Unawaited, fmt.Errorf("%w: the asking message %s already finished without this answer to question %s",
			ErrUnawaited, rec.Activity, rec.MessageID)
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return NotAnAnswer, nil
	default:
		return NotAnAnswer, err
	}
}
