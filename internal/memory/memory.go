// Package memory keeps the recent turns of each conversation in a
// JetStream stream (events.StreamMemory), so that every handler sees what
// was said before.
//
// Subject: events.MemorySubject(workspace, conversation), conversation
// from events.ConversationOf. Each message is a JSON list of handler.Turn
// recorded together (a message and its reply, a message without a reply,
// or a conversation's seed), published with a Nats-Msg-Id derived from the
// inbound activity id and the roles it holds (events.MemoryMsgID). So:
//
//   - an append is one publish: concurrent dispatchers and repliers never
//     contend and never lose a turn (no read-modify-write of one key);
//   - a redelivery or replay within the stream's duplicate window is
//     dropped by the server, and a read skips any turn it already holds
//     (same ActivityID and Role), so a turn never shows twice;
//   - the stream's MaxMsgsPerSubject, Config.Turns and Config.MaxBytes
//     bound what is kept and read; its MaxAge drops turns older than
//     MOLECULE_HISTORY_TTL.
//
// A read is one batched direct get of the conversation's subject
// (directget.go); a Store keeps what it read and asks only for what is
// newer (readcache.go). Conversations an earlier version kept in the
// key-value bucket events.BucketHistory are read through and carried
// over (migrate.go). docs/memory.md says why and how.
//
// Memory is best-effort: callers log and count a failed read or write and
// carry on; nothing is retried or dead-lettered for it.
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Defaults of Config.
const (
	// DefaultTurns is how many turns a conversation keeps: the canvas's own
	// history window is the last 20 messages.
	DefaultTurns = 20
	// DefaultMaxBytes bounds one conversation's turns as read (64 KiB).
	DefaultMaxBytes = 64 << 10
	// minMaxBytes keeps room for a few truncated turns.
	minMaxBytes = 1 << 10
)

// TruncatedMark ends the text of a turn that was cut to fit
// Config.MaxBytes/4.
const TruncatedMark = " […truncated]"

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = configerr.For("memory")

// Config bounds the memory.
type Config struct {
	// Turns is how many turns a conversation keeps (the newest). 0 turns
	// memory off: New returns a nil Store, which never touches NATS. The
	// stream keeps TopologyConfig.HistoryTurns messages per conversation
	// (at least as many turns); a larger Turns sees no more than that.
	Turns int
	// MaxBytes bounds a conversation's turns as read, encoded as JSON: the
	// oldest are dropped until they fit, and one turn's text is cut to
	// MaxBytes/4 bytes (ending in TruncatedMark) when it is recorded. If
	// not set, DefaultMaxBytes; at least 1024.
	MaxBytes int
}

// Store reads and writes conversation turns. A nil *Store is memory off:
// every method is a no-op. It is safe for concurrent use.
type Store struct {
	js     jetstream.JetStream
	stream string
	get    *directGetter
	legacy jetstream.KeyValue // events.BucketHistory of an earlier version, or nil
	cfg    Config
	cache  readCache
}

// New returns the Store over the topology's memory stream (and, where an
// earlier version left one, its history bucket, read through), or nil,
// nil when cfg.Turns is 0 (memory off).
func New(js jetstream.JetStream, topo *events.Topology, cfg Config) (*Store, error) {
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
	case js == nil || topo == nil || topo.Memory == nil:
		return nil, fmt.Errorf("%w: no %s stream (create the topology as an admin, or turn memory off)", ErrInvalidConfig, events.StreamMemory)
	}
	info := topo.Memory.CachedInfo()
	return &Store{
		js:     js,
		stream: info.Config.Name,
		get:    newDirectGetter(js.Conn(), info.Config.Name, batchOf(info.Config.MaxMsgsPerSubject)),
		legacy: topo.History,
		cfg:    cfg,
		cache:  readCache{staleAfter: cacheFor},
	}, nil
}

// batchOf is the batch of a conversation read: the stream's bound per
// conversation, so that one request usually returns all of it.
func batchOf(perSubject int64) int {
	if perSubject <= 0 || perSubject > maxBatch {
		return maxBatch
	}
	return int(perSubject)
}

// On reports whether memory is on.
func (s *Store) On() bool { return s != nil }

// Load returns a conversation's turns, oldest first, bounded by
// Config.Turns and Config.MaxBytes; none when it has no turns (or memory
// is off). A conversation held only by the history bucket of an earlier
// version is read from there and carried over to the stream.
func (s *Store) Load(ctx context.Context, workspace, conversation string) ([]handler.Turn, error) {
	if s == nil {
		return nil, nil
	}
	shared, err := s.turns(ctx, events.MemorySubject(workspace, conversation))
	if err != nil {
		return nil, err
	}
	turns := slices.Clone(shared) // the handler may change its copy
	if len(turns) == 0 && s.legacy != nil {
		if turns, err = s.carryOver(ctx, workspace, conversation); err != nil {
			return nil, err
		}
		return s.bound(turns), nil
	}
	return turns, nil
}

// Seed stores turns as a conversation's start, only if it has no turns
// yet (create-only at the stream leader: losing to another writer is
// fine), and returns them as bounded.
func (s *Store) Seed(ctx context.Context, workspace, conversation string, turns []handler.Turn) ([]handler.Turn, error) {
	if s == nil || len(turns) == 0 {
		return nil, nil
	}
	turns = s.bound(s.clipAll(turns))
	if err := s.seed(ctx, workspace, conversation, turns, ""); err != nil {
		return turns, err
	}
	return turns, nil
}

// seed publishes turns as the conversation's first message, expecting its
// subject to hold none.
func (s *Store) seed(ctx context.Context, workspace, conversation string, turns []handler.Turn, msgID string) error {
	data, err := json.Marshal(turns)
	if err != nil {
		return fmt.Errorf("memory: encode: %w", err)
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithExpectStream(s.stream)}
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	_, err = s.js.Publish(ctx, events.MemorySubject(workspace, conversation), data, opts...)
	if err != nil && !isWrongLastSequence(err) {
		return fmt.Errorf("memory: seed: %w", err)
	}
	return nil
}

// isWrongLastSequence reports the server's refusal of an expected last
// sequence (10071; 10164 on a replicated stream): the conversation already
// has turns.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Record appends turns to a conversation as one message, each turn's text
// cut to Config.MaxBytes/4. Turns of one inbound message (their
// ActivityID) carry a Nats-Msg-Id, so that recording them again within
// the stream's duplicate window stores nothing; added is the number of
// turns stored (0 for such a duplicate). It returns once the stream holds
// them.
func (s *Store) Record(ctx context.Context, workspace, conversation string, turns ...handler.Turn) (added int, err error) {
	if s == nil || len(turns) == 0 {
		return 0, nil
	}
	data, err := json.Marshal(s.clipAll(turns))
	if err != nil {
		return 0, fmt.Errorf("memory: encode: %w", err)
	}
	msg := &nats.Msg{Subject: events.MemorySubject(workspace, conversation), Data: data,
		Header: nats.Header{jetstream.ExpectedStreamHeader: []string{s.stream}}}
	if id := msgIDOf(workspace, conversation, turns); id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	ack, err := s.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("memory: write %s: %w", msg.Subject, err)
	}
	if ack.Duplicate {
		return 0, nil
	}
	return len(turns), nil
}

// msgIDOf is the Nats-Msg-Id of turns recorded together: the inbound
// message's id and their roles, or "" when they do not all belong to one
// inbound message.
func msgIDOf(workspace, conversation string, turns []handler.Turn) string {
	activity := turns[0].ActivityID
	roles := make([]string, 0, len(turns))
	for _, t := range turns {
		if t.ActivityID == "" || t.ActivityID != activity {
			return ""
		}
		roles = append(roles, t.Role)
	}
	return events.MemoryMsgID(workspace, conversation, activity, strings.Join(roles, "+"))
}

// clipAll returns turns with each text cut to MaxBytes/4, copying only
// when one is cut.
func (s *Store) clipAll(turns []handler.Turn) []handler.Turn {
	limit := s.cfg.MaxBytes / 4
	out, copied := turns, false
	for i, t := range turns {
		if len(t.Text) <= limit {
			continue
		}
		if !copied {
			out, copied = append([]handler.Turn(nil), turns...), true
		}
		out[i].Text = truncate(t.Text, limit)
	}
	return out
}

// bound keeps the newest Turns turns and drops the oldest until their JSON
// fits MaxBytes (the newest is always kept).
func (s *Store) bound(turns []handler.Turn) []handler.Turn {
	if len(turns) > s.cfg.Turns {
		turns = turns[len(turns)-s.cfg.Turns:]
	}
	size := 1 // the list's brackets, less the comma the first turn does not need
	first := len(turns)
	for first > 0 {
		n := turnSize(turns[first-1]) + 1 // its comma
		if size+n > s.cfg.MaxBytes && first < len(turns) {
			break
		}
		size += n
		first--
	}
	return turns[first:]
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
