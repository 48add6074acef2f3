// Package dlq is the dead-letter tooling shared by the stages and the
// command line: publishing a dead letter, listing, showing, replaying and
// purging them, and sweeping messages that exhausted their deliveries
// without a terminal acknowledgement out of the work-queue streams.
//
// Dead letters live in the events.StreamDLQ stream on
// events.DLQSubject(stage, workspace); an Entry is addressed by its
// sequence number in that stream.
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrNotFound is returned by Get and Replay for a sequence that holds no
// dead letter.
var ErrNotFound = errors.New("dlq: no dead letter at that sequence")

// ErrNotReplayable is returned by Replay for a dead letter that has no
// original subject or envelope to republish.
var ErrNotReplayable = errors.New("dlq: dead letter cannot be replayed")

// UnknownWorkspace is the subject token used for a dead letter whose
// workspace id is missing or not a valid subject token (a malformed
// envelope).
const UnknownWorkspace = "_unknown"

// Entry is one dead letter as stored.
type Entry struct {
	// Seq is the dead letter's sequence in events.StreamDLQ.
	Seq uint64 `json:"seq"`
	// Subject is the dead letter's subject, molecule.dlq.<stage>.<ws>.
	Subject string `json:"subject"`
	// Stored is when the dead letter was stored.
	Stored time.Time `json:"stored"`
	// DeadLetter is the decoded dead letter; nil when it could not be
	// decoded (DecodeError says why, Raw holds the bytes).
	DeadLetter *events.DeadLetter `json:"dead_letter,omitempty"`
	// DecodeError is set when DeadLetter is nil.
	DecodeError string `json:"decode_error,omitempty"`
	// Raw is the stored message body. It holds the message a user or a
	// peer sent: print an Entry through Redacted unless the body was asked
	// for.
	Raw []byte `json:"raw,omitempty"`
	// Withheld names what Redacted left out; empty on an Entry as stored.
	Withheld []string `json:"withheld,omitempty"`
}

// Filter selects dead letters. Zero fields match everything.
type Filter struct {
	// Stage is events.StagePoller, StageDispatcher or StageReplier.
	Stage string
	// WorkspaceID is the workspace the dead letter belongs to.
	WorkspaceID string
	// Reason is one of the events.Reason* constants.
	Reason string
	// Limit caps how many entries List returns. If not set, no limit.
	Limit int
}

func (f Filter) subject() string {
	stage, ws := "*", "*"
	if f.Stage != "" {
		stage = f.Stage
	}
	if f.WorkspaceID != "" {
		ws = subjectToken(f.WorkspaceID)
	}
	return events.DLQSubject(stage, ws)
}

func (f Filter) match(e *Entry) bool {
	if f.Reason == "" {
		return true
	}
	return e.DeadLetter != nil && e.DeadLetter.Reason == f.Reason
}

func subjectToken(ws string) string {
	if events.ValidateWorkspaceID(ws) != nil {
		return UnknownWorkspace
	}
	return ws
}

// MsgID is the Nats-Msg-Id of a dead-letter publish,
// "<stage>:<workspace>:<activity>:<original seq>", so a retried write of
// the same dead letter (a stage that published it but died before
// terminating the message) is dropped by the stream's duplicate window.
func MsgID(dl events.DeadLetter) string {
	return dl.Stage + ":" + dl.WorkspaceID + ":" + dl.ActivityID + ":" + strconv.FormatUint(dl.OriginalSeq, 10)
}

// Publish stores a dead letter on events.DLQSubject(dl.Stage,
// dl.WorkspaceID) and waits for the stream's acknowledgement. FailedAt is
// set to now when zero. A workspace id that is not a valid subject token is
// published under UnknownWorkspace (the envelope keeps the original value).
func Publish(ctx context.Context, js jetstream.JetStream, dl events.DeadLetter) error {
	_, _, err := PublishStored(ctx, js, dl)
	return err
}

// PublishStored is Publish that also returns the dead letter's sequence
// in the dead-letter stream (what `dlq show SEQ` takes) and says whether
// the stream stored it: false when it dropped it as a copy of one it holds
// (the same MsgID within its duplicate window; seq is then that one's).
func PublishStored(ctx context.Context, js jetstream.JetStream, dl events.DeadLetter) (seq uint64, stored bool, err error) {
	msg, err := message(ctx, dl, MsgID(dl))
	if err != nil {
		return 0, false, err
	}
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, false, fmt.Errorf("dlq: publish dead letter of %s %s/%s: %w", dl.Stage, dl.WorkspaceID, dl.ActivityID, err)
	}
	return ack.Sequence, !ack.Duplicate, nil
}

// Action is what a log line says to do about the dead letter at seq.
func Action(seq uint64) string {
	return fmt.Sprintf("inspect it with `molecule-relay dlq show %d`, fix the cause, then `molecule-relay dlq replay %d`", seq, seq)
}

// PublishAsync is Publish without the wait, for a stage that publishes
// many messages at once and waits for all their acknowledgements (the
// poller): it returns the future of the stream's acknowledgement. msgID
// is the dead letter's Nats-Msg-Id; if empty, MsgID(dl).
func PublishAsync(ctx context.Context, js jetstream.JetStream, dl events.DeadLetter, msgID string) (jetstream.PubAckFuture, error) {
	if msgID == "" {
		msgID = MsgID(dl)
	}
	msg, err := message(ctx, dl, msgID)
	if err != nil {
		return nil, err
	}
	f, err := js.PublishMsgAsync(msg, jetstream.WithExpectStream(events.StreamDLQ))
	if err != nil {
		return nil, fmt.Errorf("dlq: publish dead letter of %s %s/%s: %w", dl.Stage, dl.WorkspaceID, dl.ActivityID, err)
	}
	return f, nil
}

// message is the NATS message of dl, with msgID as its Nats-Msg-Id and the
// trace context of ctx.
func message(ctx context.Context, dl events.DeadLetter, msgID string) (*nats.Msg, error) {
	if dl.Stage == "" {
		return nil, fmt.Errorf("dlq: dead letter without a stage")
	}
	if dl.FailedAt.IsZero() {
		dl.FailedAt = time.Now().UTC()
	}
	data, err := dl.Marshal()
	if err != nil {
		return nil, fmt.Errorf("dlq: encode dead letter: %w", err)
	}
	msg := &nats.Msg{
		Subject: events.DLQSubject(dl.Stage, subjectToken(dl.WorkspaceID)),
		Data:    data,
		Header:  nats.Header{},
	}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	tracing.Inject(ctx, msg.Header)
	return msg, nil
}

func dlqStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, events.StreamDLQ)
	if err != nil {
		return nil, fmt.Errorf("dlq: open stream %s: %w", events.StreamDLQ, err)
	}
	return s, nil
}

func toEntry(m *jetstream.RawStreamMsg) Entry {
	e := Entry{Seq: m.Sequence, Subject: m.Subject, Stored: m.Time, Raw: m.Data}
	dl, err := events.DecodeDeadLetter(m.Data)
	if err != nil {
		e.DecodeError = err.Error()
	} else {
		e.DeadLetter = dl
	}
	return e
}

// walk calls fn for every stored message matching subject, in sequence
// order, until fn returns false.
func walk(ctx context.Context, s jetstream.Stream, subject string, fn func(*jetstream.RawStreamMsg) bool) error {
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dlq: read stream %s at %d: %w", events.StreamDLQ, seq, err)
		}
		if !fn(m) {
			return nil
		}
		seq = m.Sequence + 1
	}
}

// List returns the dead letters matching f, oldest first.
func List(ctx context.Context, js jetstream.JetStream, f Filter) ([]Entry, error) {
	s, err := dlqStream(ctx, js)
	if err != nil {
		return nil, err
	}
	var out []Entry
	err = walk(ctx, s, f.subject(), func(m *jetstream.RawStreamMsg) bool {
		e := toEntry(m)
		if f.match(&e) {
			out = append(out, e)
		}
		return f.Limit <= 0 || len(out) < f.Limit
	})
	return out, err
}

// Get returns the dead letter at seq, or an error matching ErrNotFound.
func Get(ctx context.Context, js jetstream.JetStream, seq uint64) (*Entry, error) {
	s, err := dlqStream(ctx, js)
	if err != nil {
		return nil, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: read dead letter %d: %w", seq, err)
	}
	e := toEntry(m)
	return &e, nil
}

// replayMark sits between a replayed message's original Nats-Msg-Id and
// its dead letter's sequence.
const replayMark = ":replay:"

// IsReplay says whether a message with headers h was published by
// Replay: its Nats-Msg-Id carries replayMark.
func IsReplay(h nats.Header) bool {
	return strings.Contains(h.Get(jetstream.MsgIDHeader), replayMark)
}

// Replay re-delivers the dead letter at seq to its stage: it deletes the
// stage's record of the message (the dispatcher's handled record, or the
// replier's reply record unless that record says a post may already have
// reached the platform — then the replier's reconciliation decides), then
// republishes the original envelope on OriginalSubject with Nats-Msg-Id
// "<original msg id>:replay:<seq>", then deletes the dead letter. A Replay
// retried after a failure re-publishes nothing twice (the id is stable).
func Replay(ctx context.Context, js jetstream.JetStream, seq uint64) error {
	e, err := Get(ctx, js, seq)
	if err != nil {
		return err
	}
	dl := e.DeadLetter
	if dl == nil || dl.OriginalSubject == "" || len(dl.Envelope) == 0 {
		return fmt.Errorf("%w: %d has no original subject or envelope", ErrNotReplayable, seq)
	}
	if err := forgetRecord(ctx, js, dl); err != nil {
		return err
	}
	msg := &nats.Msg{Subject: dl.OriginalSubject, Data: dl.Envelope, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, originalMsgID(dl, seq)+replayMark+strconv.FormatUint(seq, 10))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("dlq: republish dead letter %d on %s: %w", seq, dl.OriginalSubject, err)
	}
	return deleteEntry(ctx, js, seq)
}

func originalMsgID(dl *events.DeadLetter, seq uint64) string {
	if dl.WorkspaceID == "" || dl.ActivityID == "" {
		return "dlq:" + strconv.FormatUint(seq, 10)
	}
	switch dl.Stage {
	case events.StageReplier:
		return events.ReplyMsgID(dl.WorkspaceID, dl.ActivityID)
	default:
		return events.InboundMsgID(dl.WorkspaceID, dl.ActivityID)
	}
}

// forgetRecord deletes the stage's record of the dead letter's message so a
// replay is really processed again.
func forgetRecord(ctx context.Context, js jetstream.JetStream, dl *events.DeadLetter) error {
	if dl.WorkspaceID == "" || dl.ActivityID == "" {
		return nil
	}
	switch dl.Stage {
	case events.StageDispatcher:
		kv, err := js.KeyValue(ctx, events.BucketHandled)
		if err != nil {
			return fmt.Errorf("dlq: open bucket %s: %w", events.BucketHandled, err)
		}
		if err := kv.Delete(ctx, events.HandledKey(dl.WorkspaceID, dl.ActivityID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("dlq: delete handled record: %w", err)
		}
	case events.StageReplier:
		kv, err := js.KeyValue(ctx, events.BucketReplies)
		if err != nil {
			return fmt.Errorf("dlq: open bucket %s: %w", events.BucketReplies, err)
		}
		key := events.ReplyKey(dl.WorkspaceID, dl.ActivityID)
		entry, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dlq: read reply record: %w", err)
		}
		var rec events.ReplyRecord
		if json.Unmarshal(entry.Value(), &rec) == nil && rec.State == events.StatePosting {
			// A post may have reached the platform: keep the record so the
			// replier reconciles (notify) or re-posts with the same
			// messageId (a2a) instead of posting blindly.
			return nil
		}
		if err := kv.Delete(ctx, key, jetstream.LastRevision(entry.Revision())); err != nil {
			return fmt.Errorf("dlq: delete reply record: %w", err)
		}
	}
	return nil
}

func deleteEntry(ctx context.Context, js jetstream.JetStream, seq uint64) error {
	s, err := dlqStream(ctx, js)
	if err != nil {
		return err
	}
	if err := deleteIfPresent(ctx, s, seq); err != nil {
		return fmt.Errorf("dlq: delete dead letter %d: %w", seq, err)
	}
	return nil
}

// deleteIfPresent deletes seq from s; a sequence that is already gone is
// not an error (the server answers a failed delete without saying why, so
// absence is confirmed with a read).
func deleteIfPresent(ctx context.Context, s jetstream.Stream, seq uint64) error {
	err := s.DeleteMsg(ctx, seq)
	if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		if _, gerr := s.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return nil
		}
	}
	return err
}

// Delete removes the dead letter at seq without replaying it. Deleting a
// sequence that holds nothing is not an error.
func Delete(ctx context.Context, js jetstream.JetStream, seq uint64) error {
	return deleteEntry(ctx, js, seq)
}

// Purge deletes every dead letter matching f (Limit is ignored) and returns
// how many it deleted.
func Purge(ctx context.Context, js jetstream.JetStream, f Filter) (int, error) {
	f.Limit = 0
	entries, err := List(ctx, js, f)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if err := deleteEntry(ctx, js, e.Seq); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
