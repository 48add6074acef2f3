package replier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrInvalidConfig is matched by every error Validate and New return for a
// bad configuration.
var ErrInvalidConfig = errors.New("replier: invalid config")

// Config configures a Replier. The zero value is valid: SetDefaults (and
// New) fill every unset field.
type Config struct {
	// Concurrency is how many posts run at once in this process, and the
	// most replies it holds fetched but unacknowledged. If not set, 16.
	Concurrency int
	// FetchBatch caps the messages asked for by one pull. If not set,
	// Concurrency.
	FetchBatch int
	// FetchWait is how long one pull waits when the queue is empty. If not
	// set, 1 second.
	FetchWait time.Duration
	// NotifyTimeout bounds one POST /notify. If not set, 30 seconds.
	NotifyTimeout time.Duration
	// A2ATimeout is sent as X-Timeout on a POST /a2a to a peer: how long
	// the platform waits for a push-mode peer's agent before it queues the
	// message and answers 202. The replier itself waits A2AGrace longer,
	// so the platform's answer, not our timeout, ends the call. Under a
	// run deadline it is shortened to fit. If not set, 10 minutes.
	A2ATimeout time.Duration
	// RetryBase and RetryMax shape the redelivery delay after a retryable
	// failure: min(RetryMax, RetryBase*2^(delivery-1)), ±20% jitter, or the
	// platform's Retry-After when longer (capped at RetryMax). If not set,
	// 2 seconds and 5 minutes.
	RetryBase time.Duration
	RetryMax  time.Duration
	// ProgressInterval is how often the replier tells the server a reply
	// is still being posted. If not set, a third of the replier consumer's
	// AckWait.
	ProgressInterval time.Duration
	// StartMargin: when the context has a deadline (a Lambda invocation),
	// no reply is fetched unless deadline-now >= StartMargin + the longer
	// of NotifyTimeout and MinA2ATimeout + A2AGrace (plus the wait until
	// some workspace's rate budget allows a post). If not set, 2 seconds.
	StartMargin time.Duration
	// RateReserve is the number of requests per platform rate-limit window
	// and per workspace sharing the bucket that a post never spends
	// (molecule.Client.TakeBudget): at the reserve the post waits for the
	// window to reset, so the heartbeats (which share the bucket) always
	// get through; under a deadline that the reset leaves no room for a
	// post, the reply is handed back until the reset instead. If not set,
	// 3; negative means 0.
	RateReserve int
	// StoreTimeout bounds the record writes and acks around a post. If not
	// set, 30 seconds.
	StoreTimeout time.Duration
	// ReconcileSkew is how far before the posting record's time a notify
	// row may be dated and still count as ours (clock difference between
	// this host and the platform). If not set, 2 minutes.
	ReconcileSkew time.Duration
	// ReconcileTimeout bounds one check of the feed for an earlier notify
	// whose outcome is unknown; every failing page is retried within it.
	// A check that times out leaves the reply for a later delivery. If not
	// set, 2 minutes.
	ReconcileTimeout time.Duration
	// SweepInterval is how often Run scans for replies that exhausted their
	// deliveries unacknowledged. If not set, 1 minute.
	SweepInterval time.Duration
	// Logger receives the replier's events; never reply texts above debug
	// level, never tokens. If nil, slog.Default().
	Logger *slog.Logger
	// BeforeNotify, when set, is called with the workspace and text of
	// every canvas reply just before it is posted (the poller then knows
	// which notify rows on the feed are this relay's own; see
	// poller.Config.OwnNotify). If nil, nothing is called.
	BeforeNotify func(workspace, text string)
	// Observer, when set, receives post times and deliveries (the metrics
	// histograms); it must be quick and safe for concurrent use.
	Observer Observer
	// TestHooks are crash points for tests only; nil in production.
	TestHooks *Hooks
}

// Hooks are crash points, for tests only. A hook that returns a non-nil
// error makes the replier abandon the reply right there — no further
// record write, post, ack or nak — as if the process had died; the test
// then closes the NATS connection and cancels the context.
type Hooks struct {
	// BeforePost runs after the "posting" record was written, before the
	// POST is sent.
	BeforePost func(ctx context.Context, r *events.Reply) error
	// AfterPost runs after the platform accepted the POST, before the
	// record says "sent".
	AfterPost func(ctx context.Context, r *events.Reply) error
	// AfterSent runs after the record says "sent", before the ack.
	AfterSent func(ctx context.Context, r *events.Reply) error
}

// SetDefaults fills every unset field except ProgressInterval, which New
// derives from the consumer's AckWait.
func (c *Config) SetDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.FetchBatch == 0 || c.FetchBatch > c.Concurrency {
		c.FetchBatch = c.Concurrency
	}
	if c.FetchWait == 0 {
		c.FetchWait = time.Second
	}
	if c.NotifyTimeout == 0 {
		c.NotifyTimeout = 30 * time.Second
	}
	if c.A2ATimeout == 0 {
		c.A2ATimeout = 10 * time.Minute
	}
	if c.RetryBase == 0 {
		c.RetryBase = 2 * time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 5 * time.Minute
	}
	switch {
	case c.RateReserve == 0:
		c.RateReserve = 3
	case c.RateReserve < 0:
		c.RateReserve = 0
	}
	if c.StartMargin == 0 {
		c.StartMargin = 2 * time.Second
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = 30 * time.Second
	}
	if c.ReconcileSkew == 0 {
		c.ReconcileSkew = 2 * time.Minute
	}
	if c.ReconcileTimeout == 0 {
		c.ReconcileTimeout = 2 * time.Minute
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field; ackWait is the replier
// consumer's AckWait (0 skips the ProgressInterval check).
func (c *Config) Validate(ackWait time.Duration) error {
	switch {
	case c.Concurrency < 1 || c.FetchBatch < 1:
		return fmt.Errorf("%w: concurrency and fetch batch must be >= 1", ErrInvalidConfig)
	case c.FetchWait <= 0 || c.NotifyTimeout <= 0 || c.A2ATimeout <= 0 || c.StoreTimeout <= 0 || c.SweepInterval <= 0 || c.ReconcileTimeout <= 0:
		return fmt.Errorf("%w: fetch wait, timeouts and sweep interval must be positive", ErrInvalidConfig)
	case c.RetryBase <= 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("%w: need 0 < retry base (%s) <= retry max (%s)", ErrInvalidConfig, c.RetryBase, c.RetryMax)
	case c.StartMargin < 0 || c.ReconcileSkew < 0:
		return fmt.Errorf("%w: start margin and reconcile skew must be >= 0", ErrInvalidConfig)
	case c.ProgressInterval <= 0:
		return fmt.Errorf("%w: progress interval must be positive", ErrInvalidConfig)
	case ackWait > 0 && c.ProgressInterval >= ackWait:
		return fmt.Errorf("%w: progress interval %s must be shorter than the consumer's AckWait %s", ErrInvalidConfig, c.ProgressInterval, ackWait)
	}
	return nil
}

// Observer receives the replier's latencies.
type Observer interface {
	// ObservePost is one post attempt's duration on route (dlq.Route*).
	ObservePost(route string, d time.Duration)
	// ObserveDelivered is a reply the platform accepted at "at", for an
	// inbound row created at created (zero when unknown).
	ObserveDelivered(route string, created, at time.Time)
}
