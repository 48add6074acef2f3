// Package stage is the one runner behind the dispatcher and the replier: it
// pulls from a stage's durable JetStream consumer with a bounded buffer,
// admits work only while a run's deadline leaves room for it, keeps each
// message alive while it is worked on, retries with NakWithDelay by
// delivery count, dead-letters what cannot succeed, sweeps messages that
// exhausted their deliveries unacknowledged, and counts all of it.
//
// A stage is its domain logic only: a Process function that receives one
// Delivery and finishes it with the Runner's Ack, Retry, Defer or
// DeadLetter. Cross-cutting steps wrap a Process as Middleware (see
// Chain); New puts the ones every stage needs around it (counting,
// metadata, keep-alive).
package stage

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/dlq"
)

// Process works on one delivery and must finish it (Ack, Retry, Defer,
// DeadLetter, or abandon it on purpose) before returning. ctx is the run's
// context: it ends when the run is stopped, and work in flight should then
// still finish (see Runner.OpContext).
type Process func(ctx context.Context, d *Delivery)

// Middleware wraps a Process with a cross-cutting step.
type Middleware func(Process) Process

// Chain wraps p in mw, the first one outermost.
func Chain(p Process, mw ...Middleware) Process {
	for i := len(mw) - 1; i >= 0; i-- {
		p = mw[i](p)
	}
	return p
}

// Delivery is one delivery of a message to a stage.
type Delivery struct {
	Msg  jetstream.Msg
	Meta *jetstream.MsgMetadata
	// Progress tells the server at once that the message is still being
	// worked on (rate limited; see KeepAlive). Safe from any goroutine.
	Progress func()
	// WorkspaceID and ActivityID name the message in a dead letter once the
	// stage decoded it. If not set, the workspace comes from the subject.
	WorkspaceID, ActivityID string

	park func(func())
	keep keepAlive // behind Progress (keepingAlive)
}

// Admission is the start-margin rule of a stage: given the time left
// before the run's deadline (StartMargin already taken off), how long the
// next pull may wait; <= 0 stops fetching. It is asked only when the run's
// context has a deadline. If nil, a pull may wait until the time left is
// used up.
type Admission func(left time.Duration) time.Duration

// Target is where a stage reads and dead-letters: its durable consumer on
// its work-queue stream, and the stage name its dead letters carry.
type Target = dlq.SweepTarget

// Runner runs one stage's Process on the messages of its consumer. It is
// safe for concurrent use; any number of Runners in any number of
// processes can share a consumer.
type Runner struct {
	js         jetstream.JetStream
	target     Target
	cfg        Config
	admit      Admission
	maxDeliver int
	process    Process
	log        *slog.Logger
	stats      counters
}

// New applies cfg's defaults (ProgressInterval from the consumer's
// AckWait: the shorter of the cached consumer info's and ackWait), validates it and
// returns a Runner of process on target. maxDeliver is the consumer's
// MaxDeliver when its info is not cached (0: no limit). New makes no
// request.
func New(js jetstream.JetStream, target Target, cfg Config, ackWait time.Duration, maxDeliver int, admit Admission, process Process) (*Runner, error) {
	return Open(js, target, &cfg, ackWait, maxDeliver, admit, process)
}

// Open is New for a stage whose own config embeds a Config: it writes the
// effective settings (defaults applied, ProgressInterval derived) back
// into *cfg.
func Open(js jetstream.JetStream, target Target, cfg *Config, ackWait time.Duration, maxDeliver int, admit Admission, process Process) (*Runner, error) {
	if js == nil || target.Consumer == nil || target.Stream == nil || process == nil {
		return nil, fmt.Errorf("%w: need a JetStream handle, a consumer and its stream, and a process function", ErrInvalidConfig)
	}
	cfg.SetDefaults()
	if ci := target.Consumer.CachedInfo(); ci != nil {
		// The server applies the consumer's own AckWait; ackWait is what
		// the topology config says it should be, and an EnsureTopology
		// (an admin's, on a least-privilege cluster) may lower it to that
		// while this stage runs, converting a consumer from an earlier
		// version. Keep-alives are paced for the shorter of the two, so
		// they hold before and after the change.
		if ackWait <= 0 || ci.Config.AckWait < ackWait {
			ackWait = ci.Config.AckWait
		}
		maxDeliver = ci.Config.MaxDeliver
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = ackWait / 3
	}
	if err := cfg.Validate(ackWait); err != nil {
		return nil, err
	}
	// The one place a stage's "stage" attribute is added: the caller's
	// logger must not carry one (it would show twice on every line).
	cfg.Logger = cfg.Logger.With("stage", target.Stage)
	r := &Runner{js: js, target: target, cfg: *cfg, admit: admit, maxDeliver: maxDeliver, log: cfg.Logger}
	r.process = Chain(process, r.counting, r.withMetadata, r.keepingAlive)
	return r, nil
}

// Config returns the effective configuration (defaults applied).
func (r *Runner) Config() Config { return r.cfg }

// InFlight is how many deliveries this Runner is working on now, across
// its runs and drains.
func (r *Runner) InFlight() int { return int(r.stats.inFlight.Load()) }

// Logger is the stage's logger (with its "stage" attribute).
func (r *Runner) Logger() *slog.Logger { return r.log }

// Stats returns the shared counters since New.
func (r *Runner) Stats() Stats { return r.stats.snapshot() }

// Run processes messages until ctx ends, then stops fetching, lets the
// work in flight finish and returns nil. Messages that exhaust their
// deliveries unacknowledged are swept to the dead-letter stream every
// SweepInterval meanwhile. It returns an error only if the NATS
// connection is closed under it.
func (r *Runner) Run(ctx context.Context) error {
	sweepCtx, stopSweep := context.WithCancel(ctx)
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		_ = dlq.SweepMaxDeliveries(sweepCtx, r.js, r.target, r.cfg.SweepInterval, r.log)
	}()
	err := r.pull(ctx, 0)
	stopSweep()
	<-sweepDone
	return err
}

// Drain sweeps once, listens for max-deliveries advisories, and processes
// messages until the queue has stayed empty for idle (if not set, 1
// second) with nothing in flight, or ctx ends, or the Admission says no
// more work fits before ctx's deadline. It waits for the work in flight
// and returns the shared counts of this drain. For CLI one-shots and
// Lambda drains.
func (r *Runner) Drain(ctx context.Context, idle time.Duration) (Stats, error) {
	if idle <= 0 {
		idle = time.Second
	}
	before := r.stats.snapshot()
	if n, err := dlq.SweepOnce(ctx, r.js, r.target); err != nil && ctx.Err() == nil {
		r.log.Warn(r.target.Stage+": sweep of max-delivered messages failed", "error", err)
	} else if n > 0 {
		r.log.Warn(r.target.Stage+": moved max-delivered messages to the dead-letter stream", "count", n)
	}
	if sw, err := dlq.StartSweeper(r.js, r.target, r.log); err == nil {
		defer sw.Stop()
	}
	err := r.pull(ctx, idle)
	return r.stats.snapshot().Sub(before), err
}

func (r *Runner) pull(ctx context.Context, idle time.Duration) error {
	opts := poolOptions{idle: idle, maxWait: r.admitWait(ctx)}
	err := runPool(ctx, r.js, r.target.Consumer, r.cfg, opts, func(msg jetstream.Msg, park func(func())) {
		r.process(ctx, &Delivery{Msg: msg, park: park})
	})
	if err != nil {
		return fmt.Errorf("%s: %w", r.target.Stage, err)
	}
	return nil
}

// admitWait applies the start-margin rule to the pool: with a ctx
// deadline, a pull may only wait until the last moment the stage's
// Admission allows.
//
// A run whose deadline leaves no room from its first pull on would take
// nothing and say nothing: that is a configuration to fix (a deadline
// shorter than the stage's work, say a Lambda timeout under
// MOLECULE_HANDLER_TIMEOUT), so it is logged.
func (r *Runner) admitWait(ctx context.Context) func() time.Duration {
	first := true
	return func() time.Duration {
		dl, ok := ctx.Deadline()
		if !ok {
			return r.cfg.FetchWait
		}
		left := time.Until(dl) - r.cfg.StartMargin
		wait := left
		if r.admit != nil {
			wait = r.admit(left)
		}
		if first && wait <= 0 {
			r.log.Warn(r.target.Stage+": the run's deadline leaves no room to start any work; nothing taken",
				"time_left", time.Until(dl).Round(time.Millisecond), "start_margin", r.cfg.StartMargin,
				"hint", "give the run more time than the stage's work needs (handler or post timeout plus the start margin)")
		}
		first = false
		return wait
	}
}

// OpContext bounds the writes around one message (StoreTimeout); it
// outlives a cancelled run context so that a stop lets work in flight
// finish cleanly.
func (r *Runner) OpContext(runCtx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(runCtx), r.cfg.StoreTimeout)
}

// Fits says whether work that needs need can still start now under the
// start-margin rule: true without a deadline, else when deadline - now >=
// need + StartMargin.
func (r *Runner) Fits(runCtx context.Context, need time.Duration) bool {
	dl, ok := runCtx.Deadline()
	return !ok || time.Until(dl) >= need+r.cfg.StartMargin
}
