package replier

import (
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrInvalidConfig is matched by every error Validate and New return for a
// bad configuration.
var ErrInvalidConfig = configerr.For("replier")

// Config configures a Replier. The zero value is valid: SetDefaults (and
// New) fill every unset field. The embedded stage.Config holds what every
// stage configures alike (Concurrency: posts at once; FetchBatch;
// FetchWait; RetryBase and RetryMax for a retryable failure, or the
// platform's Retry-After when longer, capped at RetryMax;
// ProgressInterval; StartMargin: under a deadline no reply is fetched
// unless deadline-now >= StartMargin + the longer of NotifyTimeout and
// MinA2ATimeout + A2AGrace, plus the wait until some workspace's rate
// budget allows a post; StoreTimeout for the record writes and acks around
// a post; SweepInterval; Logger: never reply texts above debug level,
// never tokens); its defaults are stage's.
type Config struct {
	stage.Config
	// NotifyTimeout bounds one POST /notify. If not set, 30 seconds.
	NotifyTimeout time.Duration
	// A2ATimeout is sent as X-Timeout on a POST /a2a to a peer: how long
	// the platform waits for a push-mode peer's agent before it queues the
	// message and answers 202. The replier itself waits A2AGrace longer,
	// so the platform's answer, not our timeout, ends the call. Under a
	// run deadline it is shortened to fit. If not set, 10 minutes.
	A2ATimeout time.Duration
	// RateReserve is the number of requests per platform rate-limit window
	// and per workspace sharing the bucket that a post never spends
	// (molecule.Client.TakeBudget): at the reserve the post waits for the
	// window to reset, so the heartbeats (which share the bucket) always
	// get through; under a deadline that the reset leaves no room for a
	// post, the reply is handed back until the reset instead. If not set,
	// 3; negative means 0.
	RateReserve int
	// ReconcileSkew is how far before the posting record's time a notify
	// row may be dated and still count as ours (clock difference between
	// this host and the platform). If not set, 2 minutes.
	ReconcileSkew time.Duration
	// ReconcileTimeout bounds one check of the feed for an earlier notify
	// whose outcome is unknown; every failing page is retried within it.
	// A check that times out leaves the reply for a later delivery. If not
	// set, 2 minutes.
	ReconcileTimeout time.Duration
	// BeforeNotify, when set, is called with the workspace and text of
	// every canvas reply just before it is posted (the poller then knows
	// which notify rows on the feed are this relay's own; see
	// poller.Config.OwnNotify). If nil, nothing is called.
	BeforeNotify func(workspace, text string)
	// Observer, when set, receives post times and deliveries (the metrics
	// histograms); it must be quick and safe for concurrent use.
	Observer Observer
	// Memory, when set, is the conversation memory: a sent reply that
	// carries a conversation has its turns recorded there. If nil, memory
	// is off and its bucket is never touched.
	Memory *memory.Store
	// Lookup, when set, gives the client of a workspace not in New's
	// clients (one the workspace registry added while the relay runs).
	// It must be quick and safe for concurrent use. If nil, only New's
	// clients post.
	Lookup func(workspace string) *molecule.Client
}

// SetDefaults fills every unset field except ProgressInterval, which New
// derives from the consumer's AckWait.
func (c *Config) SetDefaults() {
	c.Config.SetDefaults()
	if c.NotifyTimeout == 0 {
		c.NotifyTimeout = 30 * time.Second
	}
	if c.A2ATimeout == 0 {
		c.A2ATimeout = 10 * time.Minute
	}
	switch {
	case c.RateReserve == 0:
		c.RateReserve = molecule.DefaultPostReserve
	case c.RateReserve < 0:
		c.RateReserve = 0
	}
	if c.ReconcileSkew == 0 {
		c.ReconcileSkew = 2 * time.Minute
	}
	if c.ReconcileTimeout == 0 {
		c.ReconcileTimeout = 2 * time.Minute
	}
}

// Validate reports the first invalid field; ackWait is the replier
// consumer's AckWait (0 skips the ProgressInterval check).
func (c *Config) Validate(ackWait time.Duration) error {
	if err := c.Config.Validate(ackWait); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.NotifyTimeout <= 0 || c.A2ATimeout <= 0 || c.ReconcileTimeout <= 0:
		return fmt.Errorf("%w: timeouts must be positive", ErrInvalidConfig)
	case c.ReconcileSkew < 0:
		return fmt.Errorf("%w: reconcile skew must be >= 0", ErrInvalidConfig)
	}
	return nil
}

// Observer receives the replier's latencies.
type Observer interface {
	// ObservePost is one post attempt's duration on route (events.Route*).
	ObservePost(route string, d time.Duration)
	// ObserveDelivered is a reply the platform accepted at "at", for an
	// inbound row created at created (zero when unknown).
	ObserveDelivered(route string, created, at time.Time)
}
