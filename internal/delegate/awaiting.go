package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// awaiting is the value of an events.AwaitingKey: the questions a
// workspace asked one peer, in the order they were asked. It is how an
// answer that names none of our ids (a TypeScript channel or Python SDK
// agent answers with a fresh messageId and no metadata) finds its
// question: the oldest one still awaited (FIFO), or, when the answer
// echoes a contextId, the oldest one asked in that context. The ask
// records stay the source of truth; this list only orders them, and
// remembers which answer claimed which question, so that a redelivered
// answer completes the same question again (a duplicate), never a second.
type awaiting struct {
	Questions []awaited `json:"questions"`
}

// awaited is one question in an awaiting list.
type awaited struct {
	MessageID string    `json:"message_id"`
	ContextID string    `json:"context_id,omitempty"`
	Deadline  time.Time `json:"deadline"`
	// Since is when this run put the question on the list, just before
	// sending it: until its record says sent, an answer may be racing
	// the record's update (ErrInFlight).
	Since time.Time `json:"since"`
	// AnsweredBy is the activity of the answer that claimed the question.
	AnsweredBy string `json:"answered_by,omitempty"`
}

// inFlight is how long after Since a question not yet recorded sent is
// taken to be in flight: its POST is answered in milliseconds by a
// poll-mode peer; past this, it failed (the handler's re-run sends it
// again).
const inFlight = 10 * time.Second

// ErrInFlight: a peer's message may answer a question whose record is
// not yet marked sent (the answer raced the record's update); retry the
// message shortly.
var ErrInFlight = errors.New("delegate: a question to this peer is being sent; its answer may be this message")

// claimKeep is how long a claimed question stays in the list after its
// deadline, for redeliveries of its answer: the ask record's own TTL.
const claimKeep = events.DefaultAskTTL

// expect puts question id (asked in contextID, awaited until deadline)
// on the awaiting list of s.Workspace and peer, before it is sent: an
// answer cannot precede its question, and a question that was never sent
// is skipped by the matching (its record has no SentAt).
func expect(ctx context.Context, kv jetstream.KeyValue, s Scope, peer, id, contextID string, deadline time.Time) error {
	key := events.AwaitingKey(s.Workspace, peer)
	for range maxCAS {
		list, rev, err := loadAwaiting(ctx, kv, key)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		found, now := false, time.Now().UTC()
		for i := range list.Questions {
			if q := &list.Questions[i]; q.MessageID == id {
				q.Deadline, q.Since, found = deadline, now, true
			}
		}
		if !found {
			list.Questions = append(list.Questions, awaited{MessageID: id, ContextID: contextID, Deadline: deadline, Since: now})
		}
		list.prune(time.Now(), id)
		if err = writeJSON(ctx, kv, key, list, rev); err == nil || !isConflict(err) {
			return err
		}
	}
	return fmt.Errorf("delegate: awaiting list %s kept changing", key)
}

// forget takes question id off the awaiting list of s.Workspace and peer
// once its ask returned, unless an answer claimed it (the claim is kept
// for the answer's redeliveries): questions answered through our
// metadata or a push response, or given up, do not pile up on the list.
func forget(ctx context.Context, kv jetstream.KeyValue, s Scope, peer, id string) error {
	key := events.AwaitingKey(s.Workspace, peer)
	for range maxCAS {
		list, rev, err := loadAwaiting(ctx, kv, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		n := len(list.Questions)
		list.Questions = slices.DeleteFunc(list.Questions, func(q awaited) bool { return q.MessageID == id && q.AnsweredBy == "" })
		if len(list.Questions) == n {
			return nil
		}
		if err = writeJSON(ctx, kv, key, list, rev); err == nil || !isConflict(err) {
			return err
		}
	}
	return fmt.Errorf("delegate: awaiting list %s kept changing", key)
}

// prune drops questions no answer can claim any more: unclaimed past
// their deadline, claimed longer than claimKeep ago. keep is never
// dropped.
func (l *awaiting) prune(now time.Time, keep string) {
	out := l.Questions[:0]
	for _, q := range l.Questions {
		gone := q.AnsweredBy == "" && now.After(q.Deadline) || now.After(q.Deadline.Add(claimKeep))
		if !gone || q.MessageID == keep {
			out = append(out, q)
		}
	}
	l.Questions = out
}

// claimedBy returns the question activity already claimed, or nil.
func (l *awaiting) claimedBy(activity string) *awaited {
	for i := range l.Questions {
		if l.Questions[i].AnsweredBy == activity {
			return &l.Questions[i]
		}
	}
	return nil
}

// routeUnaddressed matches in, a peer's message naming no question of
// ours, to the oldest question its workspace still awaits from that
// peer (in that contextId, if in carries one), claims it in the
// awaiting list (compare-and-set), then stores the answer in its record.
// No such question: NotAnAnswer, the ordinary path.
func routeUnaddressed(ctx context.Context, asks, handled jetstream.KeyValue, in *events.Inbound) (Outcome, error) {
	key := events.AwaitingKey(in.WorkspaceID, in.SourceWorkspaceID)
	for range maxCAS {
		list, rev, err := loadAwaiting(ctx, asks, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return NotAnAnswer, nil
		case err != nil:
			return NotAnAnswer, err
		}
		q := list.claimedBy(in.ActivityID)
		if q == nil {
			if q, err = pick(ctx, asks, handled, list, in); q == nil || err != nil {
				return NotAnAnswer, err
			}
			q.AnsweredBy = in.ActivityID
			list.prune(time.Now(), q.MessageID)
			if err = writeJSON(ctx, asks, key, list, rev); isConflict(err) {
				continue
			} else if err != nil {
				return NotAnAnswer, err
			}
		}
		return store(ctx, asks, handled, events.AskKey(in.WorkspaceID, q.MessageID), in, false)
	}
	return NotAnAnswer, fmt.Errorf("delegate: awaiting list %s kept changing", key)
}

// pick returns the first question of list that in may answer: unclaimed,
// within its deadline, in in's contextId when in carries one, and still
// awaited by its record (pending, sent, its asking message unfinished).
// A first such question still being sent is ErrInFlight: skipping it
// would hand its answer to the handler as a new message.
func pick(ctx context.Context, asks, handled jetstream.KeyValue, list *awaiting, in *events.Inbound) (*awaited, error) {
	now := time.Now()
	for i := range list.Questions {
		q := &list.Questions[i]
		if q.AnsweredBy != "" || now.After(q.Deadline) || in.ContextID != "" && q.ContextID != in.ContextID {
			continue
		}
		rec, _, err := loadRecord(ctx, asks, events.AskKey(in.WorkspaceID, q.MessageID))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue
		case err != nil:
			return nil, err
		case rec.State != events.AskPending || rec.Peer != in.SourceWorkspaceID:
			continue
		case rec.SentAt.IsZero() && now.Sub(q.Since) < inFlight:
			return nil, ErrInFlight
		case rec.SentAt.IsZero():
			continue // its send failed; a re-run sends it again
		}
		if out, err := unawaited(ctx, handled, rec, in); err != nil && out == NotAnAnswer {
			return nil, err
		} else if out != NotAnAnswer {
			continue
		}
		return q, nil
	}
	return nil, nil
}

func loadAwaiting(ctx context.Context, kv jetstream.KeyValue, key string) (*awaiting, uint64, error) {
	var l awaiting
	e, err := kv.Get(ctx, key)
	if err != nil {
		return &l, 0, err
	}
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return &l, 0, fmt.Errorf("delegate: awaiting list %s unreadable: %w", key, err)
	}
	return &l, e.Revision(), nil
}

// writeJSON creates the key's value (rev 0) or updates it at rev.
func writeJSON(ctx context.Context, kv jetstream.KeyValue, key string, v any, rev uint64) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = kv.Create(ctx, key, data)
		return err
	}
	_, err = kv.Update(ctx, key, data, rev)
	return err
}
