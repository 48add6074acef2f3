package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// stopDrainIdle is how long the reply queue must stay empty, once this
// process's handlers are done, for the stop to count its replies posted.
// The dispatcher published them all before the drain began.
const stopDrainIdle = 250 * time.Millisecond

// stopper orders a long-running Run's stop. When the caller's context
// ends (SIGTERM) it:
//   - ends take: the poller, the push ingress and the dispatcher take no
//     new work; the dispatcher waits for its handlers in flight;
//   - ends reply once the dispatcher returned (at once without one): the
//     replier finishes its posts in flight, then, when this run
//     dispatches, drains the reply queue, so the replies of the handlers
//     that just finished are posted before the exit;
//   - ends limit at the grace minus a tail: a handler still running is cut
//     and its message handed back; the drain stops taking replies;
//   - stops waiting for the stages at the grace minus the time Close
//     needs, and says what was left.
//
// A stage's failure ends every context at once, as before.
type stopper struct {
	rt    *Runtime
	log   *slog.Logger
	grace time.Duration

	caller context.Context
	base   context.Context // never ended by the caller; ended by a failure
	fail   context.CancelCauseFunc
	take   context.Context
	reply  context.Context
	limit  context.Context

	endTake, endReply, endLimit context.CancelFunc

	wg      sync.WaitGroup
	unhook  func() bool
	overdue chan struct{} // closed when the grace is (nearly) over
	// drain: the stop drains the reply queue (this run dispatches, or
	// Stages.ReplyDrain), so what is left in it is reported.
	drain bool

	mu      sync.Mutex
	began   time.Time
	timers  []*time.Timer
	d       *dispatcher.Dispatcher
	r       *replier.Replier
	beforeD dispatcher.Stats
	beforeR replier.Stats
}

func (rt *Runtime) newStopper(ctx context.Context) *stopper {
	st := &stopper{rt: rt, log: rt.Log, grace: rt.Cfg.StopGrace.D(), caller: ctx, overdue: make(chan struct{})}
	if st.grace <= 0 {
		st.grace = 25 * time.Second
	}
	st.limit, st.endLimit = context.WithCancel(context.Background())
	st.base, st.fail = context.WithCancelCause(stage.WithStopLimit(context.WithoutCancel(ctx), st.limit))
	st.take, st.endTake = context.WithCancel(st.base)
	st.reply, st.endReply = context.WithCancel(st.base)
	return st
}

// watch names the stages whose work the stop finishes and counts, and
// arms the stop on the caller's context.
func (st *stopper) watch(d *dispatcher.Dispatcher, r *replier.Replier) {
	st.mu.Lock()
	st.d, st.r = d, r
	st.mu.Unlock()
	st.unhook = context.AfterFunc(st.caller, st.begin)
}

// start runs a stage; an error other than a stop fails the whole run.
func (st *stopper) start(name string, run func() error) {
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		err := run()
		switch {
		case err == nil || errors.Is(err, context.Canceled):
		case st.caller.Err() != nil && errors.Is(err, nats.ErrConnectionClosed):
			// A stage still running when the grace ran out (wait gave
			// up on it) meets the connection the caller then closed:
			// the end of a stop, not a failure.
			st.log.Debug("stage ended by the connection's close after the stop", "stage", name)
		default:
			st.log.Error("stage stopped", "stage", name, "err", err)
			st.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

func (st *stopper) failed() bool { return st.base.Err() != nil }

// dispatched is called when the dispatcher's Run returned: every handler
// of this process finished and published its reply.
func (st *stopper) dispatched() { st.endReply() }

// begin starts the graceful stop (the caller's context ended).
func (st *stopper) begin() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.began = time.Now()
	tail := min(st.grace/5, 3*time.Second)
	closing := min(st.grace/10, time.Second)
	attrs := []any{"grace", st.grace}
	if st.d != nil {
		st.beforeD = st.d.Stats()
		attrs = append(attrs, "handlers_in_flight", st.d.InFlight())
	}
	if st.r != nil {
		st.beforeR = st.r.Stats()
		attrs = append(attrs, "replies_in_flight", st.r.InFlight())
	}
	if secondSignalExits(st.caller) {
		attrs = append(attrs, "hint", "press Ctrl-C again to exit at once; the work in flight is then redelivered at the next start")
	}
	st.log.Info("stop: finishing the work in flight; no new work is taken", attrs...)
	st.endTake()
	if st.d == nil {
		st.endReply()
	}
	st.timers = append(st.timers,
		time.AfterFunc(st.grace-tail, st.endLimit),
		time.AfterFunc(st.grace-closing, func() { close(st.overdue) }))
}

// drainReplies posts what the reply queue holds until it stays empty for
// idle or the stop's limit ends.
func (st *stopper) drainReplies(r *replier.Replier, idle time.Duration) error {
	ctx, cancel := context.WithCancel(st.base)
	defer cancel()
	defer context.AfterFunc(st.limit, cancel)()
	_, err := r.Drain(ctx, idle)
	return err
}

// drainQueued is drainReplies after a dispatcher that is not this run's
// (Stages.ReplyDrain), which stopped before the stop began: nothing more
// comes into the queue, so an empty one is done at once, without the
// idle wait (mcp must exit within Claude Code's 500 ms, and usually has
// nothing queued).
func (st *stopper) drainQueued(r *replier.Replier, idle time.Duration) error {
	ctx, cancel := context.WithCancel(st.base)
	defer cancel()
	defer context.AfterFunc(st.limit, cancel)()
	if q, err := st.rt.queued(st.rt.Topo.Replier)(ctx); err == nil && q == 0 {
		return nil
	}
	return st.drainReplies(r, idle)
}

// wait waits for the stages (at most until the grace is nearly over once
// the stop began), says what the stop finished and returns the run's
// error.
func (st *stopper) wait() error {
	done := make(chan struct{})
	go func() {
		st.wg.Wait()
		close(done)
	}()
	overdue := false
	select {
	case <-done:
	case <-st.overdue:
		overdue = true
	}
	st.report(overdue)
	if err := context.Cause(st.base); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// report logs what the stop finished and what it leaves for the next start.
func (st *stopper) report(overdue bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.began.IsZero() {
		return
	}
	// The counts are the run's, since its start; *_while_stopping the
	// part of them the stop finished.
	attrs := []any{"took", time.Since(st.began).Round(time.Millisecond)}
	var left []string
	if d := st.d; d != nil {
		now := d.Stats()
		attrs = append(attrs, "handled", now.Handled, "handled_while_stopping", now.Handled-st.beforeD.Handled,
			"dead_lettered", now.DeadLettered)
		if cut := now.CutByStop - st.beforeD.CutByStop; cut > 0 {
			attrs = append(attrs, "handlers_cut", cut)
			left = append(left, fmt.Sprintf("%d handler(s) cut at the end of the grace were handed back and run again", cut))
		}
		if n := d.InFlight(); n > 0 {
			attrs = append(attrs, "handlers_still_running", n)
			left = append(left, fmt.Sprintf("%d handler(s) still running are redelivered after the consumer's AckWait", n))
		}
	}
	if r := st.r; r != nil {
		now := r.Stats()
		attrs = append(attrs, "replies_posted", posted(now), "posted_while_stopping", posted(now)-posted(st.beforeR),
			"replies_dead_lettered", now.DeadLettered)
		if n := r.InFlight(); n > 0 {
			attrs = append(attrs, "posts_still_running", n)
			left = append(left, fmt.Sprintf("%d post(s) still in flight are settled (looked up on the feed, never posted twice)", n))
		}
		if st.drain {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(st.caller), 500*time.Millisecond)
			q, err := st.rt.queued(st.rt.Topo.Replier)(ctx)
			cancel()
			if err == nil && q > 0 {
				attrs = append(attrs, "replies_queued", q)
				left = append(left, fmt.Sprintf("%d repl(ies) not posted in time stay queued", q))
			}
		}
	}
	if overdue {
		attrs = append(attrs, "grace_over", true)
	}
	if len(left) == 0 {
		st.log.Info("stop: done", attrs...)
		return
	}
	attrs = append(attrs, "left", left, "where", st.durableWhere())
	st.log.Warn("stop: done, with work left for the next start; it is durable and picked up there", attrs...)
}

// durableWhere says where the work left by a stop waits.
func (st *stopper) durableWhere() string {
	if st.rt.Cfg.NATS.URL != "" {
		return "NATS at NATS_URL"
	}
	return "the embedded NATS store " + st.rt.Cfg.NATS.StoreDir + " (start again with the same NATS_STORE_DIR)"
}

func posted(s replier.Stats) uint64 { return s.Notified + s.SentA2A + s.Reconciled }

// close releases the stop's timers and contexts.
func (st *stopper) close() {
	if st.unhook != nil {
		st.unhook()
	}
	st.mu.Lock()
	for _, t := range st.timers {
		t.Stop()
	}
	st.mu.Unlock()
	st.endLimit()
	st.endReply()
	st.endTake()
	st.fail(nil)
}

type secondSignalKey struct{}

// WithSecondSignalExits marks ctx as one whose end comes from a signal
// that, sent again, ends the process at once (the CLI releases its
// handlers after the first): the stop's first line then says so.
func WithSecondSignalExits(ctx context.Context) context.Context {
	return context.WithValue(ctx, secondSignalKey{}, true)
}

func secondSignalExits(ctx context.Context) bool {
	v, _ := ctx.Value(secondSignalKey{}).(bool)
	return v
}
