package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrInvalidConfig is matched by every error Validate returns.
var ErrInvalidConfig = configerr.For("dispatcher")

// Config configures a Dispatcher. The zero value is valid: SetDefaults (and
// New) fill every unset field. The embedded stage.Config holds what every
// stage configures alike (Concurrency, FetchBatch, FetchWait, RetryBase and
// RetryMax for a retryable handler error, ProgressInterval, StartMargin:
// a handler is only started if deadline-now >= HandlerTimeout +
// StartMargin, StoreTimeout for the writes after a handler, SweepInterval,
// Logger, and how the runner delivers replies: Direct, OnReply); its
// defaults are stage's.
type Config struct {
	stage.Config
	// HandlerTimeout bounds one handler run (its context's deadline). If
	// not set, 5 minutes.
	HandlerTimeout time.Duration
	// LogSlowHandler: a handler still running is logged every
	// LogSlowHandler, with its message's ids and how long it has run. If
	// not set, never.
	LogSlowHandler time.Duration
	// MaxHops: an inbound message whose Hops is at least MaxHops gets no
	// reply (loop guard). If not set, 3.
	MaxHops int
	// ReplyToReplies lets the dispatcher reply to a message that is itself
	// a reply: InReplyTo set, or a peer's message with role "agent" (how
	// other SDKs mark their answers, without our metadata, so the hop count
	// cannot follow them; docs/protocol.md §6). If not set, false:
	// such a message is handled but its reply is dropped, so two
	// auto-replying agents cannot loop.
	ReplyToReplies bool
	// PeerStreak bounds the loop guard for peers without hop count (a
	// TypeScript channel agent: role "user", no metadata): in a
	// ping-pong with one such peer (each of its messages sent after our
	// reply to the one before, within PeerStreakGap of it), the message
	// after PeerStreak turns is not handled; a pause longer than the gap,
	// or a message sent before we answered the previous one, starts a new
	// streak. Off with ReplyToReplies or without the asks bucket. If not
	// set, 8.
	PeerStreak int
	// PeerStreakGap is the pause that ends a peer's streak. If not set,
	// 1 minute: an agent answering every message through a 5-second poll
	// answers well within it.
	PeerStreakGap time.Duration
	// ObserveHandler, when set, receives every handler run's duration (the
	// metrics histogram); it must be quick and safe for concurrent use.
	ObserveHandler func(time.Duration)
	// Agent, when set, opens the agent API session of each handler run
	// (Request.Agent); the dispatcher ends it when the handler returns.
	// If nil, handlers get no agent API.
	Agent AgentAPI
	// Memory, when set, is the conversation memory: handlers get the
	// history and replies carry what the replier records. If nil, memory
	// is off and its bucket is never touched.
	Memory *memory.Store
	// Files, when set, fetches each message's attachments before its
	// handler runs (internal/filecache: in this process, so the paths are
	// the handler's). If nil, handlers get the URIs only.
	Files Files
	// Uploads, when set, uploads the local files an answer to a canvas
	// user attaches (a path or file:// URI) and replaces them with the
	// platform's URIs, once per answer and file (filecache.Uploader). If
	// nil, or for an answer to a peer (which cannot read this workspace's
	// uploads), such an attachment is a permanent error saying so.
	Uploads Uploads
}

// Uploads uploads an answer's local files (filecache.Uploader).
type Uploads interface {
	Upload(ctx context.Context, ws, answer string, atts []events.Attachment) ([]events.Attachment, error)
}

// Files holds a message's attachments locally (filecache.Cache).
type Files interface {
	// Fetch returns the message's files; an error says one failed for a
	// reason that may pass (the message is tried again, but on its last
	// delivery the handler gets the files with the reasons).
	Fetch(ctx context.Context, in *events.Inbound) ([]handler.File, error)
}

// AgentAPI opens per-message agent API sessions (internal/agentapi.Server).
type AgentAPI interface {
	// Open starts the session of in's handler run, valid until deadline
	// or until end is called, whichever comes first. ctx is the handler's
	// context: calls made over HTTP carry its values.
	Open(ctx context.Context, in *events.Inbound, deadline time.Time) (agent handler.Agent, end func())
}

// SetDefaults fills every unset field except ProgressInterval, which New
// derives from the consumer's AckWait.
func (c *Config) SetDefaults() {
	c.Config.SetDefaults()
	if c.HandlerTimeout == 0 {
		c.HandlerTimeout = 5 * time.Minute
	}
	if c.MaxHops == 0 {
		c.MaxHops = 3
	}
	if c.PeerStreak == 0 {
		c.PeerStreak = 8
	}
	if c.PeerStreakGap == 0 {
		c.PeerStreakGap = time.Minute
	}
}

// Validate reports the first invalid field; ackWait is the dispatcher
// consumer's AckWait (0 skips the ProgressInterval check).
func (c *Config) Validate(ackWait time.Duration) error {
	if err := c.Config.Validate(ackWait); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.HandlerTimeout <= 0:
		return fmt.Errorf("%w: handler timeout must be positive", ErrInvalidConfig)
	case c.MaxHops < 1:
		return fmt.Errorf("%w: max hops must be >= 1, got %d", ErrInvalidConfig, c.MaxHops)
	case c.PeerStreak < 1 || c.PeerStreakGap <= 0:
		return fmt.Errorf("%w: peer streak must be >= 1 and its gap positive, got %d and %s", ErrInvalidConfig, c.PeerStreak, c.PeerStreakGap)
	}
	return nil
}
