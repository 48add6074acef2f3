package stage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
)

// Defaults of Config, applied by SetDefaults.
const (
	// DefaultConcurrency is how many messages a stage works on at once.
	DefaultConcurrency = 16
	// DefaultFetchWait is how long one pull waits on an empty queue.
	DefaultFetchWait = time.Second
	// DefaultRetryBase and DefaultRetryMax shape the redelivery delay.
	DefaultRetryBase = 2 * time.Second
	DefaultRetryMax  = 5 * time.Minute
	// DefaultStartMargin is the room left before a run's deadline.
	DefaultStartMargin = 2 * time.Second
	// DefaultStoreTimeout bounds the writes around one message.
	DefaultStoreTimeout = 30 * time.Second
	// DefaultSweepInterval is how often Run sweeps max-delivered messages.
	DefaultSweepInterval = time.Minute
)

// ErrInvalidConfig is matched by every error Config.Validate and New
// return. A stage wraps it in its own sentinel as well.
var ErrInvalidConfig = configerr.For("stage")

// ErrStopGraceOver is the cause of a Detach context ended by its run's
// stop limit: a graceful stop's grace ran out before the work finished.
var ErrStopGraceOver = errors.New("stage: the stop's grace ran out")

// Config is what every stage configures the same way: how much it works
// on at once, how it pulls, how it retries and how long its writes may
// take. The zero value is valid: SetDefaults (and New) fill every unset
// field. A stage's own config embeds it.
type Config struct {
	// Concurrency is how many messages the stage works on at once in this
	// process, and the most it holds fetched but unacknowledged. If not
	// set, DefaultConcurrency (16).
	Concurrency int
	// FetchBatch caps the messages asked for by one pull. If not set (or
	// larger), Concurrency.
	FetchBatch int
	// FetchWait is how long one pull waits for messages when the queue is
	// empty; it also bounds how long a stop waits for the pull in flight.
	// If not set, 1 second.
	FetchWait time.Duration
	// RetryBase and RetryMax shape the redelivery delay after a retryable
	// failure: min(RetryMax, RetryBase*2^(delivery-1)), ±20% jitter (see
	// RetryDelay). If not set, 2 seconds and 5 minutes.
	RetryBase time.Duration
	RetryMax  time.Duration
	// ProgressInterval is how often the stage tells the server a message
	// is still being worked on (InProgress). If not set, New makes it a
	// third of the consumer's AckWait (or of the configured one, when
	// shorter). It must be shorter than AckWait.
	ProgressInterval time.Duration
	// StartMargin: when the run's context has a deadline (a Lambda
	// invocation), work is only taken if it can start and finish with
	// StartMargin to spare (see Admission). If not set, 2 seconds.
	StartMargin time.Duration
	// StoreTimeout bounds the writes around one message (records, publish,
	// dead letter, ack), retries included. If not set, 30 seconds.
	StoreTimeout time.Duration
	// SweepInterval is how often Run scans for messages that exhausted
	// their deliveries unacknowledged (dlq.SweepMaxDeliveries). If not
	// set, 1 minute.
	SweepInterval time.Duration
	// ConfirmAcks makes every ack wait for the server's confirmation and
	// retry it to a new consumer leader (see Runner.ack). Set it on a
	// replicated cluster, where a plain ack can be lost in a leader change;
	// on one server an ack is lost only with the connection, and the
	// outcome record already makes that redelivery a no-op, so the round
	// trip is not spent there. If not set, acks are not confirmed.
	ConfirmAcks bool
	// Logger receives the stage's events; never message bodies above
	// debug level. If nil, slog.Default().
	Logger *slog.Logger
	// LogMessages: the stage logs each message's milestones at info
	// level (the dispatcher: received, handled; the replier: posted),
	// with ids, kinds and sizes only. If not set, at debug level.
	LogMessages bool
	// Direct, when set, posts the replies the stage's steps leave to the
	// Runner (Deliver) in the message's slot, skipping the reply stream: a
	// replier in the same process (replier.Replier). A reply it does not
	// post is published to the stream as usual, except one the platform
	// refused for good, which is dead-lettered at once. If nil, every reply
	// is published.
	Direct ReplyDelivery
	// OnReply, when set, is called after every reply publish JetStream
	// acknowledged (a Lambda dispatcher wakes the replier function with
	// it). It must be quick and safe for concurrent use. If nil, nothing is
	// called.
	OnReply func()
}

// MessageLevel is the level of a message's milestone lines (LogMessages).
func (c *Config) MessageLevel() slog.Level {
	if c.LogMessages {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// SetDefaults fills every unset field except ProgressInterval, which New
// derives from the consumer's AckWait.
func (c *Config) SetDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.FetchBatch == 0 || c.FetchBatch > c.Concurrency {
		c.FetchBatch = c.Concurrency
	}
	setDefault(&c.FetchWait, DefaultFetchWait)
	setDefault(&c.RetryBase, DefaultRetryBase)
	setDefault(&c.RetryMax, DefaultRetryMax)
	setDefault(&c.StartMargin, DefaultStartMargin)
	setDefault(&c.StoreTimeout, DefaultStoreTimeout)
	setDefault(&c.SweepInterval, DefaultSweepInterval)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

// Validate reports the first invalid field; ackWait is the consumer's
// AckWait (0 skips the comparison of ProgressInterval with it).
func (c *Config) Validate(ackWait time.Duration) error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("%w: concurrency must be >= 1, got %d", ErrInvalidConfig, c.Concurrency)
	case c.FetchBatch < 1:
		return fmt.Errorf("%w: fetch batch must be >= 1, got %d", ErrInvalidConfig, c.FetchBatch)
	case c.FetchWait <= 0 || c.StoreTimeout <= 0 || c.SweepInterval <= 0:
		return fmt.Errorf("%w: fetch wait, store timeout and sweep interval must be positive", ErrInvalidConfig)
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
