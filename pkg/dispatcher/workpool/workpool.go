// Package workpool is the fetch-and-process loop shared by the dispatcher
// and the replier: it pulls from a durable JetStream consumer with a
// bounded buffer and processes each message in its own goroutine.
//
// Bounded buffer: a message counts against Concurrency from the moment it
// is fetched until its processing returned (after its ack, nak or term).
// Each pull asks for exactly as many messages as there are free slots, so
// no message ever waits in a client buffer while its AckWait runs.
// Consumer.Consume and Consumer.Messages pre-fetch up to PullMaxMessages
// beyond what is being processed and re-pull at a threshold, so messages
// can sit in the buffer past AckWait and be redelivered to another worker
// while still queued here (nats.go#1929); that is why this loop uses Fetch.
package workpool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config sizes a pool.
type Config struct {
	// Concurrency is the most messages fetched but not yet finished. If not
	// set, 16.
	Concurrency int
	// FetchBatch caps the messages asked for by one pull. If not set (or
	// larger), Concurrency.
	FetchBatch int
	// FetchWait is how long one pull waits for messages. If not set, 1
	// second. It also bounds how long a stop waits for the pull in flight.
	FetchWait time.Duration
	// Logger receives fetch errors. If nil, slog.Default().
	Logger *slog.Logger
}

// SetDefaults fills unset fields.
func (c *Config) SetDefaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.FetchBatch <= 0 || c.FetchBatch > c.Concurrency {
		c.FetchBatch = c.Concurrency
	}
	if c.FetchWait <= 0 {
		c.FetchWait = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Options shape one Run.
type Options struct {
	// Idle, when positive, makes Run a drain: it stops fetching once no
	// message arrived for Idle and nothing is in flight.
	Idle time.Duration
	// MaxWait, when set, is asked right before each pull (after the free
	// slots for it were taken) how long the pull may wait; a value <= 0
	// stops fetching (used for the start-margin rule).
	MaxWait func() time.Duration
}

// Process handles one message and must ack, nak or term it (or abandon it
// on purpose) before returning.
type Process func(msg jetstream.Msg)

// Run fetches from cons and calls process for each message in its own
// goroutine, never more than cfg.Concurrency at once, until ctx ends (or,
// in drain mode, the queue stays empty; or MaxWait says stop). It then
// waits for every process call to return and flushes the connection.
// Messages a pull delivers after the stop began are nak'd for immediate
// redelivery elsewhere. Run returns nil on a stop by ctx, Idle or MaxWait,
// and the error when the connection is closed under it.
func Run(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, cfg Config, opts Options, process Process) error {
	cfg.SetDefaults()
	log := cfg.Logger
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	var inflight atomic.Int64
	lastMsg := time.Now()
	failures := 0
	var runErr error

	release := func(n int) {
		for range n {
			<-sem
		}
	}

loop:
	for ctx.Err() == nil {
		// Take one slot (blocking), then every free one up to FetchBatch.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		n := 1
	grab:
		for n < cfg.FetchBatch {
			select {
			case sem <- struct{}{}:
				n++
			default:
				break grab
			}
		}
		// Only now, with the slots held, is it known how long the pull
		// may wait: the wait for a slot can outlast the admission cut-off.
		wait, ok := pullWait(ctx, cfg, opts)
		if !ok {
			release(n)
			break
		}

		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(wait))
		if err != nil {
			release(n)
			if errors.Is(err, nats.ErrConnectionClosed) {
				runErr = err
				break
			}
			failures++
			log.Warn("workpool: fetch failed", "error", err, "failures", failures)
			if !sleep(ctx, backoffDelay(failures)) {
				break
			}
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			if ctx.Err() != nil {
				_ = msg.Nak()
				<-sem
				continue
			}
			lastMsg = time.Now()
			inflight.Add(1)
			wg.Add(1)
			go func() {
				defer func() {
					<-sem
					inflight.Add(-1)
					wg.Done()
				}()
				process(msg)
			}()
		}
		release(n - got)
		if err := batch.Error(); err != nil {
			if errors.Is(err, nats.ErrConnectionClosed) {
				runErr = err
				break
			}
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				failures++
				log.Warn("workpool: pull ended with an error", "error", err, "failures", failures)
				if !sleep(ctx, backoffDelay(failures)) {
					break
				}
				continue
			}
		}
		failures = 0
		if opts.Idle > 0 && got == 0 && inflight.Load() == 0 && time.Since(lastMsg) >= opts.Idle {
			break
		}
	}
	wg.Wait()
	if nc := js.Conn(); nc != nil && !nc.IsClosed() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = nc.FlushWithContext(fctx)
		cancel()
	}
	return runErr
}

// pullWait is how long the next pull may wait, or false when fetching
// must stop (MaxWait says so, or ctx's deadline is at hand). It must be
// asked right before the pull.
func pullWait(ctx context.Context, cfg Config, opts Options) (time.Duration, bool) {
	wait := cfg.FetchWait
	if opts.Idle > 0 && opts.Idle < wait {
		wait = opts.Idle
	}
	if opts.MaxWait != nil {
		mw := opts.MaxWait()
		if mw <= 0 {
			return 0, false
		}
		wait = min(wait, mw)
	}
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl) - 10*time.Millisecond
		if rem <= 0 {
			return 0, false
		}
		wait = min(wait, rem)
	}
	return max(wait, time.Millisecond), true
}

func backoffDelay(failures int) time.Duration {
	d := 100 * time.Millisecond << min(failures, 6)
	return min(d, 5*time.Second)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
