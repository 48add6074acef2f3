// The poller's configuration, its defaults and its validation.

package poller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrInvalidConfig is matched by every error Config.Validate returns.
var ErrInvalidConfig = configerr.For("poller")

// ErrSecondRelay: another relay answers the same workspace and
// Config.RefuseSecondRelay is set, so this one stopped polling it.
var ErrSecondRelay = errors.New("poller: another relay answers this workspace (MOLECULE_SINGLETON=refuse)")

// Defaults and limits of Config.
const (
	DefaultPollInterval      = 5 * time.Second
	DefaultPageLimit         = 100
	MaxPageLimit             = 500
	DefaultOverlapWindow     = 2 * time.Minute
	DefaultOverlapEvery      = 30 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
	MaxHeartbeatInterval     = 30 * time.Second
	DefaultRateReserve       = 10
	DefaultConcurrency       = 8
	// DefaultPublishTimeout is short because a publish whose stream leader
	// dies before it answers is never acknowledged (a new leader does not
	// answer its predecessor's publishes): the whole batch then waited this
	// long before the next cycle published it again, which the stream's
	// de-duplication makes harmless. A batch on a live leader is
	// acknowledged in milliseconds. It is stage.AttemptTimeout, the bound
	// of every other JetStream request retried around a message (at 5 s,
	// make chaos-cluster showed batches waiting 5.1 s on a node kill).
	DefaultPublishTimeout = stage.AttemptTimeout
	DefaultReprobeEvery   = 10 * time.Minute
)

// DefaultOverlapFollowUps are Config.OverlapFollowUps' default: quick
// re-reads 250 ms, 1 s and 3 s after a poll that published messages.
var DefaultOverlapFollowUps = []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}

// Tasks is what the dispatcher of this process is doing for a workspace
// (dispatcher.Dispatcher.Running); known is false while it has none.
type Tasks interface {
	Running(workspace string) (n int, current string, known bool)
}

// Config configures a Poller. Zero values take the defaults SetDefaults
// documents.
type Config struct {
	// Workspaces are the platform clients, one per workspace polled.
	// Required; workspace ids must be unique.
	Workspaces []*molecule.Client
	// Dynamic: workspaces come and go while the poller runs (the
	// workspace registry, StartClient), so Workspaces may be empty. If
	// not set, false.
	Dynamic bool
	// PollInterval is the period of the long-running poll timer (Run). It is
	// the source of truth; SSE wake-ups only add polls. If not set, 5 seconds.
	PollInterval time.Duration
	// SafetyNetInterval is the period of Run's poll, with SSE, while the
	// workspace's event stream is proven healthy (the platform echoed the
	// last heartbeat on it) and no inbound message arrived since the last
	// overlap re-read: the poll is then only a safety net for an event the
	// stream missed, which it finds within 1.1 × SafetyNetInterval (±10 %
	// jitter). The state is read every second such poll. Any inbound event,
	// a published row, a failed cycle or a broken or silent stream returns
	// the poll to PollInterval at once. If not set, 2 minutes; a value not
	// longer than PollInterval (or negative) keeps the poll at PollInterval.
	SafetyNetInterval time.Duration
	// Tasks, when the dispatcher runs in this process, reports the handlers
	// running for a workspace, sent as the heartbeat's active_tasks and
	// current_task. If nil (a poller without its dispatcher, which cannot
	// tell one workspace's messages from another's), active_tasks is the
	// dispatcher consumer's ack-pending count, shared by every workspace,
	// and current_task is empty.
	Tasks Tasks
	// BroadcastInterval is the longest a cycle goes without reading the
	// workspace's broadcasts (broadcast.go); the event stream's
	// BROADCAST_MESSAGE reads them at once. A broadcast whose event was
	// missed (or without SSE) is read within BroadcastInterval plus the
	// cycle's period. If not set, 5 minutes; negative: never read.
	BroadcastInterval time.Duration
	// PageLimit is the number of rows asked for per page. If not set, 100;
	// at most 500 (the platform's cap).
	PageLimit int
	// BacklogWindow decides, on a cold start (no cursor) and after a lost
	// cursor (410), whether rows already in the feed are delivered: rows
	// newer than this are, older ones are not. If not set (0), a cold start
	// only seeds the cursor at the newest row and delivers nothing that was
	// queued before the poller's first run. On a cold start, rows queued
	// before the workspace's newest own notify in the window are taken as
	// answered (by an earlier relay or client) and not delivered either.
	BacklogWindow time.Duration
	// BacklogLimit caps the messages a cold start delivers from its backlog
	// window: the newest BacklogLimit, oldest first; the older ones are
	// left out and one WARN line counts them. If not set (0), no cap.
	BacklogLimit int
	// OverlapWindow is how far back the periodic overlap re-read looks
	// (since_secs), to catch rows the platform committed behind the cursor
	// (docs/protocol.md §4). It must be shorter than the inbound stream's
	// duplicate window. If not set, 2 minutes; negative disables the
	// re-read (and the platform's late-committed rows can then be lost).
	OverlapWindow time.Duration
	// OverlapEvery is how often the overlap re-read runs; the time of the
	// last one is kept in the status bucket, so one-shot runs share it. If
	// not set, 30 seconds. It must be shorter than OverlapWindow.
	OverlapEvery time.Duration
	// OverlapFollowUps are quick overlap re-reads scheduled, in Run, after
	// a poll that published messages: one this long after it, for each
	// entry. They read only what can still hold a late row, from where
	// the previous re-read looked (less followUpSlack) up to the cursor,
	// so a row committed behind the cursor by a concurrent sender is
	// delivered within about a second instead of at the next
	// OverlapEvery; an idle workspace never gets one. With SSE, a wake-up
	// whose poll publishes nothing (the announced row is behind the
	// cursor, or was read by the poll before) re-reads at once, or
	// followUpGap after the last follow-up.
	// If not set, DefaultOverlapFollowUps (250ms, 1s, 3s); an entry <= 0
	// turns them off.
	OverlapFollowUps []time.Duration
	// HeartbeatInterval is the period of the heartbeat in Run. If not set,
	// 30 seconds, which is also the maximum (the platform marks a workspace
	// offline after about 90 s without one). RunOnce sends one per run.
	// Negative sends none, in Run and RunOnce (an operator who heartbeats
	// the workspace from elsewhere): the platform then shows the workspace
	// offline unless that other process heartbeats, messages still queue,
	// and with SSE the poll stays at PollInterval (the stream is proven
	// healthy by the platform's echo of a heartbeat).
	HeartbeatInterval time.Duration
	// AllowSelf delivers messages the agent sent itself (source_id equal to
	// its own workspace id). If false (the default) they are skipped.
	AllowSelf bool
	// AgentName is the agent card's name when AgentCard is nil. If neither
	// is set, the client sends {"name": <workspace id>}.
	AgentName string
	// AgentCard is the agent card sent at registration (any JSON value).
	AgentCard any
	// Capabilities is runtime_metadata.capabilities of every heartbeat.
	Capabilities molecule.Capabilities
	// IdleTimeoutSeconds is runtime_metadata.idle_timeout_seconds of every
	// heartbeat; sent only when positive.
	IdleTimeoutSeconds int
	// SkipRegister turns registration off. By default (false) each
	// workspace is registered (delivery_mode poll) once, at its first start;
	// the fact is remembered in the status bucket so that one-shot runs do
	// not re-register every run (each register un-pauses the workspace).
	SkipRegister bool
	// RateReserve is the number of requests per rate-limit window and per
	// workspace always left for heartbeats (and the replier's notifies):
	// when taking one more would leave RateReserve × the workspaces sharing
	// the bucket (molecule.Config.RateBudget) or fewer, state and activity
	// requests wait for the window to reset. If not set, 10; negative
	// means 0.
	RateReserve int
	// SSE holds each workspace's event stream in Run and polls at once on
	// an inbound ACTIVITY_LOGGED. RunOnce ignores it. If false, off.
	SSE bool
	// Concurrency bounds how many workspaces RunOnce polls at once. If not
	// set, 8.
	Concurrency int
	// PublishTimeout bounds the wait for JetStream's acknowledgements of
	// one batch. If not set, DefaultPublishTimeout (2 seconds).
	PublishTimeout time.Duration
	// ReprobeEvery is how long an OLD or inconclusive generation probe is
	// trusted before it is repeated (a NEW answer is kept for good). If not
	// set, 10 minutes.
	ReprobeEvery time.Duration
	// Push maps a workspace id to the URL it is registered with in push
	// mode (the platform POSTs its messages there; internal/ingress receives
	// them). Such a workspace is registered with that URL once per process
	// (unless SkipRegister), its feed is never fetched and the generation
	// probe never stops it (push works on OLD platforms), but its state is
	// checked and its heartbeat sent as for any other. If nil, every
	// workspace is polled.
	Push map[string]string
	// ResumeFromCheckpoint: a cold start (no cursor in the store) first
	// looks for the newest checkpoint the relay wrote on the workspace's
	// own feed (WriteCheckpoints) and resumes from it; without one it
	// seeds as BacklogWindow says. Default false.
	ResumeFromCheckpoint bool
	// InstanceID names this relay process in its checkpoints and
	// heartbeats, so that two relays on one workspace can be told apart.
	// If not set, a random id.
	InstanceID string
	// BatchRows, when positive, ends a cycle's fetch after one page of at
	// most BatchRows rows (WorkspaceResult.More tells that rows are left;
	// FetchMore fetches the next batch), so that a one-shot run can answer
	// and checkpoint batch by batch. If 0, a cycle fetches until a short
	// page.
	BatchRows int
	// OwnNotify, when set, is the ledger of the canvas replies this
	// process posts (its replier's BeforeNotify): a notify row on the feed
	// that is not in it makes the poller warn, once per workspace, that a
	// second relay is probably answering the same workspace. If nil, no
	// check.
	OwnNotify *NotifyLedger
	// OtherPoller, when set, asks whether another process on this NATS
	// polls workspace ws with a ledger of its own, and returns its
	// instance id. A reply that OwnNotify does not hold is then taken for
	// that process's: both relays share the streams and consumers, so
	// nothing is answered twice, and the poller warns once of the double
	// poll instead of a second relay (RefuseSecondRelay does not stop
	// it). If nil, every such reply counts as a second relay's.
	OtherPoller func(ctx context.Context, ws string) (instance string, ok bool)
	// RefuseSecondRelay (MOLECULE_SINGLETON=refuse) stops polling a
	// workspace, in Run, once OwnNotify found a reply on its feed that this
	// relay did not post: better no answer than two. Run then returns
	// ErrSecondRelay for it. If false, the relay only warns.
	RefuseSecondRelay bool
	// Logger receives the poller's events. If nil, slog.Default().
	Logger *slog.Logger
	// OnPublished, when set, is called by Run after a poll cycle of one
	// workspace stored n > 0 new messages (a Lambda poller window wakes the
	// dispatcher function with it). It must be quick and safe for
	// concurrent use. If nil, nothing is called.
	OnPublished func(n int)
}

// SetDefaults fills every unset field with its default.
func (c *Config) SetDefaults() {
	if c.InstanceID == "" {
		c.InstanceID = newInstanceID()
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.SafetyNetInterval == 0 {
		c.SafetyNetInterval = DefaultSafetyNetInterval
	}
	if c.PageLimit == 0 {
		c.PageLimit = DefaultPageLimit
	}
	if c.BroadcastInterval == 0 {
		c.BroadcastInterval = DefaultBroadcastInterval
	}
	if c.OverlapWindow == 0 {
		c.OverlapWindow = DefaultOverlapWindow
	}
	if c.OverlapEvery == 0 {
		c.OverlapEvery = DefaultOverlapEvery
	}
	if c.OverlapFollowUps == nil {
		c.OverlapFollowUps = DefaultOverlapFollowUps
	}
	if slices.ContainsFunc(c.OverlapFollowUps, func(d time.Duration) bool { return d <= 0 }) {
		c.OverlapFollowUps = []time.Duration{}
	}
	c.OverlapFollowUps = slices.Sorted(slices.Values(c.OverlapFollowUps))
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.RateReserve == 0 {
		c.RateReserve = DefaultRateReserve
	}
	if c.RateReserve < 0 {
		c.RateReserve = 0
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.ReprobeEvery == 0 {
		c.ReprobeEvery = DefaultReprobeEvery
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// kvKeyRe is the NATS KV key alphabet; workspace ids are bucket keys.
var kvKeyRe = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)

// Validate reports the first invalid field. Call SetDefaults first.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if len(c.Workspaces) == 0 && !c.Dynamic {
		return bad("no workspace configured")
	}
	seen := make(map[string]bool, len(c.Workspaces))
	for i, cl := range c.Workspaces {
		if cl == nil {
			return bad("workspace client %d is nil", i)
		}
		id := cl.WorkspaceID()
		if err := events.ValidateWorkspaceID(id); err != nil {
			return bad("%v", err)
		}
		if !kvKeyRe.MatchString(id) {
			return bad("workspace id %q is not a valid key-value key", id)
		}
		if seen[id] {
			return bad("workspace %s configured twice", id)
		}
		seen[id] = true
	}
	for id, u := range c.Push {
		if !seen[id] {
			return bad("push URL for workspace %s, which is not configured", id)
		}
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return bad("push URL of workspace %s is not an http(s) URL", id)
		}
	}
	switch {
	case c.PollInterval < 0:
		return bad("poll interval must be positive, got %s", c.PollInterval)
	case c.PageLimit < 1 || c.PageLimit > MaxPageLimit:
		return bad("page limit must be 1..%d, got %d", MaxPageLimit, c.PageLimit)
	case c.BacklogWindow < 0:
		return bad("backlog window must not be negative, got %s", c.BacklogWindow)
	case c.BacklogLimit < 0:
		return bad("backlog limit must not be negative, got %d", c.BacklogLimit)
	case c.OverlapWindow > 0 && c.OverlapEvery >= c.OverlapWindow:
		return bad("overlap every (%s) must be shorter than the overlap window (%s), or re-reads leave gaps", c.OverlapEvery, c.OverlapWindow)
	case c.OverlapEvery < 0:
		return bad("overlap every must be positive, got %s", c.OverlapEvery)
	case c.HeartbeatInterval > MaxHeartbeatInterval:
		return bad("heartbeat interval must be at most %s (negative: off), got %s", MaxHeartbeatInterval, c.HeartbeatInterval)
	case c.IdleTimeoutSeconds < 0:
		return bad("idle timeout must not be negative, got %d", c.IdleTimeoutSeconds)
	case c.Concurrency < 1:
		return bad("concurrency must be >= 1, got %d", c.Concurrency)
	case c.PublishTimeout < 0 || c.ReprobeEvery < 0:
		return bad("publish timeout and reprobe interval must be positive")
	}
	return nil
}

// newInstanceID is a random id for a relay process.
func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
