package events

import (
	"encoding/json"
	"time"
)

// The durable records the stages keep in their key-value buckets, beside the
// envelopes they describe: the dispatcher and the replier write them, and
// dlq.Replay reads them (a replayed message is only processed again if its
// record is gone).

// Outcomes of a HandledRecord.
const (
	// OutcomeReplied: the handler answered and the reply was recorded.
	OutcomeReplied = "replied"
	// OutcomeNoReply: the handler answered "" (no reply).
	OutcomeNoReply = "no_reply"
	// OutcomeSuppressed: the handler answered, but the loop guard dropped
	// the reply (the inbound message was itself a reply, or hit MaxHops).
	OutcomeSuppressed = "suppressed"
	// OutcomeCancelled: the sender cancelled the message's task
	// (tasks/cancel) before or while the handler ran; nothing was answered.
	OutcomeCancelled = "cancelled"
)

// HandledRecord is the value of a BucketHandled key (HandledKey). The dispatcher writes it with a create-only put after
// the handler finished and before it publishes the reply and acks, so a
// redelivery after a lost ack republishes Reply instead of running the
// handler again.
type HandledRecord struct {
	// Outcome is OutcomeReplied, OutcomeNoReply or OutcomeSuppressed.
	Outcome string `json:"outcome"`
	// Reply is the Reply envelope exactly as published, when
	// Outcome is OutcomeReplied.
	Reply json.RawMessage `json:"reply,omitempty"`
	// Delivery is the delivery on which the handler finished.
	Delivery uint64 `json:"delivery"`
	// HandledAt is when the handler finished.
	HandledAt time.Time `json:"handled_at"`
	// DirectPostingAt and DirectDeadline are the posting mark of a canvas
	// reply the dispatcher posts directly (a replier in its process,
	// docs/architecture.md "Direct posting"): from DirectPostingAt a
	// notify of Reply may be in flight until DirectDeadline, and no
	// posting record in BucketReplies says so (the direct post writes only
	// the sent record). A redelivery that finds the mark writes that
	// posting record (Mark().Record()) before it republishes Reply. Zero
	// (and absent from the JSON) in every other record.
	DirectPostingAt time.Time `json:"direct_posting_at,omitzero"`
	DirectDeadline  time.Time `json:"direct_deadline,omitzero"`
	// ReplyRefused, when set, says the platform refused the direct post
	// of Reply for good (a permanent refusal, docs/protocol.md §6): the
	// reply is dead-lettered from the direct path, as the replier stage
	// would have after posting it a second time. The dispatcher updates
	// the record with it before it writes the dead letter, so a
	// redelivery writes that dead letter (its Nats-Msg-Id drops a second
	// copy) instead of republishing Reply. Nil in every other record.
	ReplyRefused *Refusal `json:"reply_refused,omitempty"`
}

// Refusal is a permanent refusal of a direct post, as its handled record
// keeps it until the reply's dead letter is written.
type Refusal struct {
	// Reason is the dead letter's reason (ReasonPermanent).
	Reason string `json:"reason"`
	// Error is the dead letter's error: what the platform answered and
	// what to do about it.
	Error string `json:"error"`
	// At is when the platform answered: the dead letter's FailedAt.
	At time.Time `json:"at"`
}

// PostingMark is what a posting record of a notify says before the POST:
// it may be in flight from At until Deadline. A HandledRecord carries one
// for a reply posted directly (HandledRecord.Mark).
type PostingMark struct {
	At, Deadline time.Time
}

// IsZero says whether m marks nothing.
func (m PostingMark) IsZero() bool { return m.At.IsZero() }

// Record is the posting record m stands for: what the replier would have
// created in BucketReplies before its first POST of the notify.
func (m PostingMark) Record() ReplyRecord {
	return ReplyRecord{State: StatePosting, Route: RouteNotify, PostingAt: m.At, Deadline: m.Deadline, Attempts: 1}
}

// Mark is r's posting mark; zero when its reply is not posted directly.
func (r HandledRecord) Mark() PostingMark {
	return PostingMark{At: r.DirectPostingAt, Deadline: r.DirectDeadline}
}

// States of a ReplyRecord.
const (
	// StatePosting: a POST of the reply is about to be or has been sent;
	// whether the platform processed it is unknown.
	StatePosting = "posting"
	// StateSent: the platform accepted the reply.
	StateSent = "sent"
)

// Routes of a ReplyRecord.
const (
	// RouteNotify: POST /workspaces/:self/notify (canvas user, self).
	RouteNotify = "notify"
	// RouteA2A: POST /workspaces/:peer/a2a (peer agent).
	RouteA2A = "a2a"
)

// ReplyRecord is the value of a BucketReplies key (ReplyKey). The replier creates it in StatePosting before the POST
// and moves it to StateSent after the platform accepted the reply, and only
// then acks.
type ReplyRecord struct {
	// State is StatePosting or StateSent.
	State string `json:"state"`
	// Route is RouteNotify or RouteA2A.
	Route string `json:"route"`
	// PostingAt is when the latest POST attempt started (replier clock).
	PostingAt time.Time `json:"posting_at"`
	// Deadline is when the latest POST attempt gives up waiting for the
	// platform (replier clock). Until then a post of a process that died
	// may still be in flight; after it (or after AnsweredAt) whatever it
	// did is on the feed. Zero in records written before it existed.
	Deadline time.Time `json:"deadline,omitzero"`
	// AnsweredAt is when the platform answered the latest POST attempt
	// with an error that leaves its outcome unknown (a 500): the request
	// is no longer in flight, so nothing needs waiting out.
	AnsweredAt time.Time `json:"answered_at,omitzero"`
	// SentAt is when the platform accepted the reply.
	SentAt time.Time `json:"sent_at,omitzero"`
	// Attempts counts POST attempts.
	Attempts int `json:"attempts"`
	// Reconciled is true when StateSent was concluded from the platform's
	// activity feed rather than from a POST answer.
	Reconciled bool `json:"reconciled,omitempty"`
}

// States of an AskRecord.
const (
	// AskPending: the question is (being) sent; no answer yet.
	AskPending = "pending"
	// AskAnswered: the peer's answer is in the record.
	AskAnswered = "answered"
	// AskAbandoned: the asking handler stopped waiting (timeout); a late
	// answer is dead-lettered.
	AskAbandoned = "abandoned"
)

// AskRecord is the value of a BucketAsks key (AskKey). The asker creates
// it in AskPending before it sends the question; the answer (a push peer's
// synchronous one, or the peer's reply routed by the dispatcher) moves it
// to AskAnswered with a compare-and-set, so a handler re-run after a crash
// finds the answer instead of asking again.
type AskRecord struct {
	State string `json:"state"`
	// Workspace asked; Peer is the workspace asked.
	Workspace string `json:"workspace"`
	Peer      string `json:"peer"`
	// Activity is the inbound activity whose handler asked.
	Activity string `json:"activity"`
	// MessageID is the question's A2A messageId.
	MessageID string `json:"message_id"`
	// Deadline is when the asker stops waiting (asker clock).
	Deadline  time.Time `json:"deadline"`
	CreatedAt time.Time `json:"created_at"`
	// SentAt is when the platform accepted the question; zero while it
	// may not have been sent (a re-run then sends it again, same id).
	SentAt time.Time `json:"sent_at,omitzero"`
	// Answer, when State is AskAnswered.
	Answer *AskAnswer `json:"answer,omitempty"`
}

// AskAnswer is a peer's answer stored in an AskRecord.
type AskAnswer struct {
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// ActivityID and MessageID are the answer's activity on the asking
	// workspace's feed and its A2A messageId; both empty for a push
	// peer's synchronous answer.
	ActivityID string    `json:"activity_id,omitempty"`
	MessageID  string    `json:"message_id,omitempty"`
	At         time.Time `json:"at"`
}

// Marshal encodes r as JSON.
func (r HandledRecord) Marshal() ([]byte, error) { return json.Marshal(r) }

// Marshal encodes r as JSON.
func (r ReplyRecord) Marshal() ([]byte, error) { return json.Marshal(r) }
