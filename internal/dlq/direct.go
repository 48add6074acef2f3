package dlq

import "github.com/molecule-ai/molecule-relay/pkg/events"

// OfDirectPost is the dead letter of a reply that a dispatcher posted
// directly (docs/architecture.md, "Direct posting") and the platform
// refused for good: the one the replier stage writes for the same refusal
// on the reply's first delivery from the reply stream (stage.Runner's
// deadLetter), without a stream sequence, since the reply never was in
// the stream. Its replay (Replay) publishes reply on the reply stream,
// as for any replier dead letter. Its MsgID is the same on every write,
// so a copy written again by the inbound message's redelivery is dropped
// within the dead-letter stream's duplicate window.
func OfDirectPost(workspaceID, activityID string, reply []byte, refusal events.Refusal) events.DeadLetter {
	return events.DeadLetter{
		Stage:           events.StageReplier,
		WorkspaceID:     workspaceID,
		ActivityID:      activityID,
		Reason:          refusal.Reason,
		Error:           refusal.Error,
		Deliveries:      1,
		OriginalSubject: events.ReplySubject(workspaceID),
		OriginalStream:  events.StreamReply,
		Envelope:        EnvelopeOf(reply),
		FailedAt:        refusal.At,
	}
}
