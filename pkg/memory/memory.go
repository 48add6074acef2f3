// Package memory keeps the recent turns of each conversation in a
// JetStream key-value bucket (events.BucketHistory), so that every handler
// sees what was said before.
//
// Key: events.HistoryKey(workspace, conversation), conversation from
// events.ConversationOf. Value: a JSON list of handler.Turn, oldest first,
// bounded by Config.Turns and Config.MaxBytes; the bucket's MaxAge
// (events.TopologyConfig.HistoryTTL) drops a conversation that has been
// silent that long. Writes are compare-and-set on the key's revision and
// retried on conflict, so concurrent dispatchers and repliers never lose a
// turn, and a turn already present (same ActivityID and Role) is not added
// again, so redeliveries and replays never duplicate one.
//
// Memory is best-effort: callers log and count a failed read or write and
// carry on; nothing is retried or dead-lettered for it.
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/handler"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Defaults of Config.
const (
	// DefaultTurns is how many turns a conversation keeps: the canvas's own
	// history window is the last 20 messages.
	DefaultTurns = 20
	// DefaultMaxBytes bounds one conversation's stored value (64 KiB).
	DefaultMaxBytes = 64 << 10
	// minMaxBytes keeps room for a few truncated turns.
	minMaxBytes = 1 << 10
	// maxAttempts bounds the compare-and-set retries of one write; with
	// conflictPause between them it rides out dozens of writers at once
	// on one conversation (TestConcurrentWritersLoseNoTurn: 30).
	maxAttempts = 32
)

// TruncatedMark ends the text of a turn that was cut to fit
// Config.MaxBytes/4.
const TruncatedMark = " […truncated]"

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("memory: invalid config")

// ErrContended is returned when a write lost the compare-and-set race
// maxAttempts times in a row.
var ErrContended = errors.New("memory: conversation written concurrently too often")

// Config bounds the memory.
type Config struct {
	// Turns is how many turns a conversation keeps (the newest). 0 turns
	// memory off: New returns a nil Store, which never touches the bucket.
	Turns int
	// MaxBytes bounds a conversation's JSON value: the oldest turns are
	// dropped until it fits, and one turn's text is cut to MaxBytes/4
	// bytes (ending in TruncatedMark). If not set, DefaultMaxBytes; at
	// least 1024.
	MaxBytes int
}

// Store reads and writes conversation turns. A nil *Store is memory off:
// every method is a no-op. It is safe for concurrent use.
type Store struct {
	kv   jetstream.KeyValue
	cfg  Config
	last lastWrites
}

// New returns the Store over kv (the topology's History bucket), or nil,
// nil when cfg.Turns is 0 (memory off).
func New(kv jetstream.KeyValue, cfg Config) (*Store, error) {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	switch {
	case cfg.Turns < 0:
		return nil, fmt.Errorf("%w: turns must be >= 0, got %d", ErrInvalidConfig, cfg.Turns)
	case cfg.Turns == 0:
		return nil, nil
	case cfg.MaxBytes < minMaxBytes:
		return nil, fmt.Errorf("%w: max bytes must be at least %d, got %d", ErrInvalidConfig, minMaxBytes, cfg.MaxBytes)
	case kv == nil:
		return nil, fmt.Errorf("%w: no %s bucket (create the topology as an admin, or turn memory off)", ErrInvalidConfig, events.BucketHistory)
	}
	return &Store{kv: kv, cfg: cfg}, nil
}

// On reports whether memory is on.
func (s *Store) On() bool { return s != nil }

// Load returns a conversation's turns, oldest first; none when it has no
// turns (or memory is off). An unreadable value reads as no turns.
func (s *Store) Load(ctx context.Context, workspace, conversation string) ([]handler.Turn, error) {
	turns, _, err := s.load(ctx, events.HistoryKey(workspace, conversation))
	return turns, err
}

func (s *Store) load(ctx context.Context, key string) (turns []handler.Turn, rev uint64, err error) {
	if s == nil {
		return nil, 0, nil
	}
	entry, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("memory: read %s: %w", key, err)
	}
	if json.Unmarshal(entry.Value(), &turns) != nil {
		// Overwritten by the next write rather than blocking memory.
		turns = nil
	}
	return turns, entry.Revision(), nil
}

// Seed stores turns as a conversation's start, only if it has no turns
// yet (a create-only write; losing a race to another writer is fine), and
// returns them as stored (bounded).
func (s *Store) Seed(ctx context.Context, workspace, conversation string, turns []handler.Turn) ([]handler.Turn, error) {
	if s == nil || len(turns) == 0 {
		return nil, nil
	}
	turns, data, err := s.bound(turns)
	if err != nil {
		return turns, fmt.Errorf("memory: encode: %w", err)
	}
	_, err = s.kv.Create(ctx, events.HistoryKey(workspace, conversation), data)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return turns, fmt.Errorf("memory: seed: %w", err)
	}
	return turns, nil
}

// Record appends turns to a conversation, skipping any it already holds
// (same non-empty ActivityID and Role), then applies the bounds. It writes
// with compare-and-set on the revision it read and starts over on a
// conflict. added is the number of turns new to the conversation.
func (s *Store) Record(ctx context.Context, workspace, conversation string, turns ...handler.Turn) (added int, err error) {
	if s == nil || len(turns) == 0 {
		return 0, nil
	}
	key := events.HistoryKey(workspace, conversation)
	for attempt := range maxAttempts {
		cur, rev, known := s.last.get(key)
		if !known || attempt > 0 {
			if cur, rev, err = s.load(ctx, key); err != nil {
				return 0, err
			}
		}
		next, added := merge(cur, turns)
		if added == 0 {
			return 0, nil
		}
		kept, data, err := s.bound(next)
		if err != nil {
			return 0, fmt.Errorf("memory: encode: %w", err)
		}
		var wrote uint64
		if rev == 0 {
			wrote, err = s.kv.Create(ctx, key, data)
		} else {
			wrote, err = s.kv.Update(ctx, key, data, rev)
		}
		switch {
		case err == nil:
			s.last.put(key, kept, wrote)
			return added, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Another writer came first: read its turns and merge again,
			// after a random pause so the racers spread out (none after a
			// stale last write: the read alone puts that right).
			s.last.drop(key)
			if known && attempt == 0 {
				continue
			}
			if err := conflictPause(ctx, attempt); err != nil {
				return 0, err
			}
		default:
			s.last.drop(key)
			return 0, fmt.Errorf("memory: write %s: %w", key, err)
		}
	}
	return 0, fmt.Errorf("%w: %s", ErrContended, key)
}

// conflictPause waits a random time up to 1 ms << attempt (at most 64 ms).
func conflictPause(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond << min(attempt, 6)))))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("memory: %w", ctx.Err())
	}
}

// merge appends the turns of add that cur does not hold.
func merge(cur, add []handler.Turn) (out []handler.Turn, added int) {
	type id struct{ activity, role string }
	seen := make(map[id]bool, len(cur))
	for _, t := range cur {
		if t.ActivityID != "" {
			seen[id{t.ActivityID, t.Role}] = true
		}
	}
	out = cur
	for _, t := range add {
		k := id{t.ActivityID, t.Role}
		if t.ActivityID != "" && seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, t)
		added++
	}
	return out, added
}

// bound cuts each turn's text to MaxBytes/4, keeps the newest Turns turns
// and drops the oldest until the JSON value fits MaxBytes; it returns the
// turns kept and their JSON.
func (s *Store) bound(turns []handler.Turn) ([]handler.Turn, []byte, error) {
	if len(turns) > s.cfg.Turns {
		turns = turns[len(turns)-s.cfg.Turns:]
	}
	out := make([]handler.Turn, len(turns))
	for i, t := range turns {
		t.Text = truncate(t.Text, s.cfg.MaxBytes/4)
		out[i] = t
	}
	data, err := json.Marshal(out)
	if err != nil || len(data) <= s.cfg.MaxBytes {
		return out, data, err // the usual case: one encoding
	}
	size := len(data)
	for len(out) > 1 && size > s.cfg.MaxBytes {
		size -= turnSize(out[0]) + 1 // its comma
		out = out[1:]
	}
	data, err = json.Marshal(out)
	return out, data, err
}

func turnSize(t handler.Turn) int {
	b, err := json.Marshal(t)
	if err != nil {
		return 0
	}
	return len(b)
}

// Clip cuts text as a stored turn's is cut (MaxBytes/4), so that what a
// reply envelope carries for memory never outgrows what memory keeps.
func (s *Store) Clip(text string) string {
	if s == nil {
		return text
	}
	return truncate(text, s.cfg.MaxBytes/4)
}

// truncate cuts s to at most max bytes, on a rune boundary, ending in
// TruncatedMark.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit - len(TruncatedMark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + TruncatedMark
}

// TurnsOf is the turns of a sent reply: the message answered (the user's
// turn, at the time it was queued) and the reply (the agent's, at sent).
// The reply must carry a Conversation.
func TurnsOf(rep *events.Reply, sent time.Time) []handler.Turn {
	return []handler.Turn{
		{Role: handler.RoleUser, Text: rep.InboundText, Attachments: rep.InboundAttachments, ActivityID: rep.ActivityID, At: rep.InboundCreatedAt},
		{Role: handler.RoleAgent, Text: rep.Text, Attachments: rep.Attachments, ActivityID: rep.ActivityID, At: sent},
	}
}

// UserTurn is the turn of an inbound message.
func UserTurn(in *events.Inbound) handler.Turn {
	return handler.Turn{Role: handler.RoleUser, Text: in.Text, Attachments: in.Attachments, ActivityID: in.ActivityID, At: in.CreatedAt}
}

// SeedTurns is the sender's own list of earlier turns
// (params.metadata.history, sent by the canvas) as turns without an
// ActivityID. It is read from the activity row the envelope carries (Raw),
// parsed again: only the first message of a conversation needs it, so the
// envelope does not carry the list twice.
func SeedTurns(in *events.Inbound) []handler.Turn {
	if len(in.Raw) == 0 {
		return nil
	}
	m, err := molecule.ParseRow(in.Raw, in.WorkspaceID)
	if err != nil || len(m.History) == 0 {
		return nil // the poller parsed this row; a row it could not parse has no message
	}
	out := make([]handler.Turn, 0, len(m.History))
	for _, h := range m.History {
		role := handler.RoleUser
		if h.Role == "agent" {
			role = handler.RoleAgent
		}
		out = append(out, handler.Turn{Role: role, Text: h.Text})
	}
	return out
}
