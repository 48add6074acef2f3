package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrInvalidConfig is matched by every error Validate returns.
var ErrInvalidConfig = errors.New("dispatcher: invalid config")

// Config configures a Dispatcher. The zero value is valid: SetDefaults (and
// New) fill every unset field.
type Config struct {
	// Concurrency is how many handlers run at once in this process, and the
	// most messages it holds fetched but unacknowledged. If not set, 16.
	Concurrency int
	// FetchBatch caps the messages asked for by one pull. If not set,
	// Concurrency.
	FetchBatch int
	// FetchWait is how long one pull waits for messages when the queue is
	// empty; it also bounds how long a stop waits for the pull in flight.
	// If not set, 1 second.
	FetchWait time.Duration
	// HandlerTimeout bounds one handler run (its context's deadline). If
	// not set, 5 minutes.
	HandlerTimeout time.Duration
	// ProgressInterval is how often the dispatcher tells the server a
	// message is still being handled (InProgress). If not set, a third of
	// the dispatcher consumer's AckWait. It must be shorter than AckWait.
	ProgressInterval time.Duration
	// MaxHops: an inbound message whose Hops is at least MaxHops gets no
	// reply (loop guard). If not set, 3.
	MaxHops int
	// ReplyToReplies lets the dispatcher reply to a message that is itself
	// a reply: InReplyTo set, or a peer's message with role "agent" (how
	// other SDKs mark their answers, without our metadata, so the hop count
	// cannot follow them; PROTOCOL.md Part 2 §17.12). If not set, false:
	// such a message is handled but its reply is dropped, so two
	// auto-replying agents cannot loop.
	ReplyToReplies bool
	// RetryBase and RetryMax shape the redelivery delay after a retryable
	// handler error: min(RetryMax, RetryBase*2^(delivery-1)), ±20% jitter.
	// If not set, 2 seconds and 5 minutes.
	RetryBase time.Duration
	RetryMax  time.Duration
	// StartMargin: when the context has a deadline (a Lambda invocation),
	// a handler is only started if deadline-now >= HandlerTimeout +
	// StartMargin. If not set, 2 seconds.
	StartMargin time.Duration
	// StoreTimeout bounds the writes after a handler finished (handled
	// record, reply publish, ack), retries included. If not set, 30 seconds.
	StoreTimeout time.Duration
	// SweepInterval is how often Run scans for messages that exhausted
	// their deliveries unacknowledged (dlq.SweepMaxDeliveries). If not set,
	// 1 minute.
	SweepInterval time.Duration
	// Logger receives the dispatcher's events; never message bodies above
	// debug level. If nil, slog.Default().
	Logger *slog.Logger
	// ObserveHandler, when set, receives every handler run's duration (the
	// metrics histogram); it must be quick and safe for concurrent use.
	ObserveHandler func(time.Duration)
	// OnReply, when set, is called after every reply publish JetStream
	// acknowledged (a Lambda dispatcher wakes the replier function with
	// it). It must be quick and safe for concurrent use. If nil, nothing is
	// called.
	OnReply func()
	// TestHooks are crash points for tests only; nil in production.
	TestHooks *Hooks
}

// Hooks are crash points, for tests only. A hook that returns a non-nil
// error makes the dispatcher abandon the message right there — no further
// record, publish, ack or nak, as if the process had died at that point;
// the test then closes the NATS connection and cancels the context to
// stop the stage for real.
type Hooks struct {
	// AfterHandler runs after the handler returned, before anything is
	// recorded.
	AfterHandler func(ctx context.Context, m *events.Inbound) error
	// AfterRecord runs after the handled record was stored, before the
	// reply is published.
	AfterRecord func(ctx context.Context, m *events.Inbound) error
	// AfterReplyPublish runs after the reply publish was acknowledged (or
	// there was no reply), before the inbound message is acked.
	AfterReplyPublish func(ctx context.Context, m *events.Inbound) error
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
	if c.HandlerTimeout == 0 {
		c.HandlerTimeout = 5 * time.Minute
	}
	if c.MaxHops == 0 {
		c.MaxHops = 3
	}
	if c.RetryBase == 0 {
		c.RetryBase = 2 * time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 5 * time.Minute
	}
	if c.StartMargin == 0 {
		c.StartMargin = 2 * time.Second
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = 30 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field; ackWait is the dispatcher
// consumer's AckWait (0 skips the ProgressInterval check).
func (c *Config) Validate(ackWait time.Duration) error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("%w: concurrency must be >= 1, got %d", ErrInvalidConfig, c.Concurrency)
	case c.FetchBatch < 1:
		return fmt.Errorf("%w: fetch batch must be >= 1, got %d", ErrInvalidConfig, c.FetchBatch)
	case c.FetchWait <= 0 || c.HandlerTimeout <= 0 || c.StoreTimeout <= 0 || c.SweepInterval <= 0:
		return fmt.Errorf("%w: fetch wait, handler timeout, store timeout and sweep interval must be positive", ErrInvalidConfig)
	case c.MaxHops < 1:
		return fmt.Errorf("%w: max hops must be >= 1, got %d", ErrInvalidConfig, c.MaxHops)
	case c.RetryBase <= 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("%w: need 0 < retry base (%s) <= retry max (%s)", ErrInvalidConfig, c.RetryBase, c.RetryMax)
	case c.StartMargin < 0:
		return fmt.Errorf("%w: start margin must be >= 0", ErrInvalidConfig)
	case c.ProgressInterval <= 0:
		return fmt.Errorf("%w: progress interval must be positive", ErrInvalidConfig)
	case ackWait > 0 && c.ProgressInterval >= ackWait:
		return fmt.Errorf("%w: progress interval %s must be shorter than the consumer's AckWait %s", ErrInvalidConfig, c.ProgressInterval, ackWait)
	}
	return nil
}
