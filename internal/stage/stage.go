// Package stage is the one runner behind the dispatcher and the replier: it
// pulls from a stage's durable JetStream consumer with a bounded buffer,
// admits work only while a run's deadline leaves room for it, keeps each
// message alive while it is worked on, retries with NakWithDelay by
// delivery count, dead-letters what cannot succeed, sweeps messages that
// exhausted their deliveries unacknowledged, and counts all of it.
//
// A stage is its domain logic only: a Step that receives one Delivery and
// returns its Outcome (Ack, Retry, Defer, DeadLetter, Abandon), which the
// Runner applies in one place. Cross-cutting steps wrap a Step (Wrap); a
// stage lists its own once with Steps. The Runner puts the ones every
// stage needs around it (counting, metadata, keep-alive).
package stage

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// process works on one delivery and finishes it before returning: the
// raw form of a stage's work, which the Runner's own middleware (counting,
// metadata, keep-alive) wraps. A stage's Step becomes one by finish.
type process func(ctx context.Context, d *Delivery)

// middleware wraps a process with a cross-cutting step of the Runner.
type middleware func(process) process

// chain wraps p in mw, the first one outermost.
func chain(p process, mw ...middleware) process {
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
	// Log is the message's logger once the stage named it (workspace,
	// activity, delivery): finishing it logs there. If nil, the stage's.
	Log *slog.Logger

	park      func(func())
	keep      keepAlive       // behind Progress (keepingAlive)
	finishCtx context.Context // FinishIn's
}

// FinishIn makes the Runner apply the delivery's Outcome in ctx rather
// than in the run's context: a stage that traces its messages passes the
// message's traced context, so that its dead letter carries the trace.
func (d *Delivery) FinishIn(ctx context.Context) { d.finishCtx = ctx }

// Admission is the start-margin rule of a stage: given the time left
// before the run's deadline (StartMargin already taken off), how long the
// next pull may wait; <= 0 stops fetching. It is asked only when the run's
// context has a deadline. If nil, a pull may wait until the time left is
// used up.
type Admission func(left time.Duration) time.Duration

// Target is where a stage reads and dead-letters: its durable consumer on
// its work-queue stream, and the stage name its dead letters carry.
type Target = events.StageQueue

// Runner runs one stage's Step on the messages of its consumer. It is
// safe for concurrent use; any number of Runners in any number of
// processes can share a consumer.
type Runner struct {
	js         jetstream.JetStream
	target     Target
	cfg        Config
	admit      Admission
	maxDeliver int
	process    process
	log        *slog.Logger
	stats      counters
}

// Open applies cfg's defaults (ProgressInterval from the consumer's
// AckWait: the shorter of the cached consumer info's and ackWait),
// validates it and returns a Runner of step on target; it writes the
// effective settings back into *cfg (a stage's own config embeds a
// Config). maxDeliver is the consumer's MaxDeliver when its info is not
// cached (0: no limit). Open makes no request.
func Open(js jetstream.JetStream, target Target, cfg *Config, ackWait time.Duration, maxDeliver int, admit Admission, step Step[*Delivery]) (*Runner, error) {
	if step == nil {
		return open(js, target, cfg, ackWait, maxDeliver, admit, nil)
	}
	var r *Runner
	r, err := open(js, target, cfg, ackWait, maxDeliver, admit, func(ctx context.Context, d *Delivery) {
		o := step(ctx, d)
		if d.finishCtx != nil {
			ctx = d.finishCtx
		}
		r.finish(ctx, d, o)
	})
	return r, err
}

func open(js jetstream.JetStream, target Target, cfg *Config, ackWait time.Duration, maxDeliver int, admit Admission, work process) (*Runner, error) {
	if js == nil || target.Consumer == nil || target.Stream == nil || work == nil {
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
	r.process = chain(work, r.counting, r.withMetadata, r.keepingAlive)
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
	err := r.pull(ctx, poolOptions{})
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
	return r.drain(ctx, poolOptions{idle: idle})
}

// DrainUntilEmpty is Drain for a queue nothing else adds to (connect
// --once: the poller published the whole batch before it began): it ends
// as soon as the consumer holds nothing (nothing pending, nothing
// unacknowledged) and nothing is in flight, without sitting out idle.
// idle bounds only the wait for what the consumer still holds but does
// not deliver yet (a retry's delayed redelivery): the caller finds it
// still queued.
func (r *Runner) DrainUntilEmpty(ctx context.Context, idle time.Duration) (Stats, error) {
	return r.drain(ctx, poolOptions{idle: idle, emptied: r.emptied})
}

// emptied says whether the stage's consumer has been delivered every
// message of its stream (its filter is the stream's subjects) and holds
// none unacknowledged. Its NumPending, and a pull that does not wait, can
// still miss a message whose publish was just acknowledged: the server
// acks a publish before it tells the consumers (nats-server v2.15
// stream.go processJetStreamMsg, sigq), while the stream's last sequence
// is already there.
func (r *Runner) emptied(ctx context.Context) (bool, error) {
	si, err := r.target.Stream.Info(ctx)
	if err != nil {
		return false, err
	}
	ci, err := r.target.Consumer.Info(ctx)
	if err != nil {
		return false, err
	}
	return ci.Delivered.Stream >= si.State.LastSeq && ci.NumAckPending == 0 && ci.NumPending == 0, nil
}

func (r *Runner) drain(ctx context.Context, opts poolOptions) (Stats, error) {
	if opts.idle <= 0 {
		opts.idle = time.Second
	}
	before := r.stats.snapshot()
	if n, err := dlq.SweepOnce(ctx, r.js, r.target); err != nil && ctx.Err() == nil {
		r.log.WarnContext(ctx, r.target.Stage+": sweep of max-delivered messages failed", "error", err)
	} else if n > 0 {
		r.log.WarnContext(ctx, r.target.Stage+": moved max-delivered messages to the dead-letter stream", "count", n)
	}
	if sw, err := dlq.StartSweeper(r.js, r.target, r.log); err == nil {
		defer sw.Stop()
	}
	err := r.pull(ctx, opts)
	return r.stats.snapshot().Sub(before), err
}

func (r *Runner) pull(ctx context.Context, opts poolOptions) error {
	opts.maxWait = r.admitWait(ctx)
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
			r.log.WarnContext(ctx, r.target.Stage+": the run's deadline leaves no room to start any work; nothing taken",
				"time_left", time.Until(dl).Round(time.Millisecond), "start_margin", r.cfg.StartMargin,
				"hint", "give the run more time than the stage's work needs (handler or post timeout plus the start margin)")
		}
		first = false
		return wait
	}
}

// OpContext bounds the writes around one message (StoreTimeout); it
// outlives a cancelled run context so that a stop lets work in flight
// finish cleanly. It behaves as context.WithTimeout(context.WithoutCancel(
// runCtx), StoreTimeout), but starts no timer of its own until something
// waits on its Done: a RetryRequest's tries stop at its deadline by their
// own timers (opContext).
func (r *Runner) OpContext(runCtx context.Context) (context.Context, context.CancelFunc) {
	return newOpContext(runCtx, r.cfg.StoreTimeout)
}

// Fits says whether work that needs need can still start now under the
// start-margin rule: true without a deadline, else when deadline - now >=
// need + StartMargin.
func (r *Runner) Fits(runCtx context.Context, need time.Duration) bool {
	dl, ok := runCtx.Deadline()
	return !ok || time.Until(dl) >= need+r.cfg.StartMargin
}
