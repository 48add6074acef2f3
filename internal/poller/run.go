// Run's long-running loop of each workspace.

package poller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Run polls every workspace until ctx ends: per workspace a loop that polls
// every PollInterval (the source of truth; after a failed cycle sooner, 250
// ms doubling up to the interval; after published rows, quick overlap
// re-reads at Config.OverlapFollowUps) and, with Config.SSE, at once
// when the workspace's event stream announces an inbound message; and a
// heartbeat every HeartbeatInterval that never waits for the rate budget.
// With SSE, while the stream is proven healthy and the workspace quiet,
// the poll is a safety net run every SafetyNetInterval instead (cadence.go).
// A workspace that cannot be polled any more (deleted, token rejected, OLD
// platform; a push workspace, Config.Push, is not stopped by OLD) is
// stopped with an error log while the others go on. Run
// returns when ctx ends or every workspace has stopped; the error joins the
// reasons workspaces stopped (nil when ctx ended and none stopped).
func (p *Poller) Run(ctx context.Context) error {
	errs := make([]error, len(p.ws))
	var wg sync.WaitGroup
	for i, w := range p.ws {
		wg.Add(1)
		p.startWorkspace(ctx, w, func(err error) {
			if err != nil {
				errs[i] = fmt.Errorf("workspace %s: %w", w.id, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pollLoop is Run's loop of one workspace, driven by the poller's clock
// and wake-ups rather than by a goroutine of its own: a cycle runs on one
// of the clock's workers (sched.go), so an idle fleet of a thousand
// workspaces holds no thousand waiting stacks (8 KiB each,
// docs/performance.md "An idle fleet"). At most one cycle of a workspace
// runs at a time; a wake-up during a cycle runs one more right after it
// (bursts coalesce, as in a one-slot channel).
type pollLoop struct {
	p      *Poller
	w      *workspace
	ctx    context.Context
	cancel context.CancelFunc
	// bg counts the event stream's loop and the heartbeats.
	bg   sync.WaitGroup
	done func(error)

	mu           sync.Mutex
	running      bool // a cycle goroutine is at work
	pending      bool // a wake-up came during the cycle
	finished     bool // done was called or is being called
	heartbeating bool
	woken        bool        // the pending cycle was asked for by an inbound event
	timer        *clockEntry // the next timed poll

	// started frees the workspace's start slot (startWorkspace).
	started func()

	// Owned by the cycle goroutine (one at a time).
	fu    followUps // quick overlap re-reads after activity (followup.go)
	retry failRetry // a failed cycle is tried again sooner (cadence.go)
}

// startWorkspace starts w's loop; done is called once with the reason it
// stopped (nil when ctx ended) after its stream loop and heartbeats ended.
//
// At most startConcurrency workspaces start at once: a workspace holds its
// slot from here to its first fetch (register, state, feed), or to the end
// of a first cycle that fetches nothing. The overlap re-read, broadcast
// read and status write after it run on the connections already open;
// holding the slot through them too made a survivor's 1,700 takeovers of
// a killed member wait 6 s in the queue (make chaos-group, two loaded
// cores). Started all at once, ten thousand workspaces opened
// as many pooled connections at the same moment, each with two
// goroutines and its buffers, and the process's RSS went past 900 MB and
// stayed there, freed memory kept by the runtime (docs/fleet.md).
func (p *Poller) startWorkspace(ctx context.Context, w *workspace, done func(error)) {
	select {
	case p.starting <- struct{}{}:
	case <-ctx.Done():
		done(nil)
		return
	}
	l := &pollLoop{p: p, w: w, done: done, started: sync.OnceFunc(func() { <-p.starting })}
	l.ctx, l.cancel = context.WithCancel(ctx)
	l.bg.Add(1)
	if p.cfg.SSE && w.pushURL == "" { // a push workspace is never fetched: no wake-ups
		go func() { defer l.bg.Done(); p.sseLoop(l.ctx, w, l) }()
	} else {
		// Aside: a fleet's start does not wait for a thousand writes.
		go func() { defer l.bg.Done(); p.noteStream(l.ctx, w, StreamDisabled, time.Now(), nil) }()
	}
	// Run's start counts as inbound activity: the first overlap re-read
	// must run before the cadence may slow (cadence.go).
	w.cad.noteActivity(time.Now())
	context.AfterFunc(l.ctx, func() {
		l.mu.Lock()
		if l.running || l.finished {
			l.mu.Unlock()
			return // the cycle ends the loop when it sees ctx ended
		}
		l.finished = true
		if l.timer != nil {
			l.timer.stop()
		}
		l.mu.Unlock()
		l.finish(nil)
	})
	l.wake()
}

// startConcurrency is how many workspaces start at once (startWorkspace):
// a cold start's first cycle takes a few platform round trips, so ten
// thousand start in seconds.
const startConcurrency = 256

// wake runs a cycle now on a worker, or right after the one running.
func (l *pollLoop) wake() {
	if l.claim() {
		l.p.clock.pool.run(l.run)
	}
}

// timed is the clock's call of the next timed poll, already on a worker.
func (l *pollLoop) timed() {
	if l.claim() {
		l.run()
	}
}

// claim marks a cycle as running and reports whether the caller is to
// run it: false when one runs (it runs one more after itself) or the loop
// finished.
func (l *pollLoop) claim() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished {
		return false
	}
	if l.running {
		l.pending = true
		return false
	}
	l.running = true
	if l.timer != nil {
		l.timer.stop()
	}
	return true
}

// wakeByEvent is wake for an inbound event on the stream: a cycle it runs
// that finds nothing after the cursor re-reads at once (cycleOpts.woken).
func (l *pollLoop) wakeByEvent() {
	l.mu.Lock()
	l.woken = true
	l.mu.Unlock()
	l.wake()
}

// wakePending reports whether a cycle is already due to run: a further
// wake-up would add nothing.
func (l *pollLoop) wakePending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// run polls until no wake-up is pending, then arms the timer of the next
// poll and returns.
func (l *pollLoop) run() {
	p, w, ctx := l.p, l.w, l.ctx
	for {
		// State is read at most once per poll interval (once per one and a
		// half safety-net intervals while settled): an SSE wake-up goes
		// straight to the fetch.
		l.mu.Lock()
		woken := l.woken
		l.woken = false
		l.mu.Unlock()
		now := time.Now()
		res := p.cycle(ctx, w, cycleOpts{checkState: p.stateDue(w, now), woken: woken, quick: l.fu.take(now), fetched: l.started})
		l.started()
		retryIn, retrySooner := l.retry.after(res.Err, p.cfg.PollInterval)
		if res.rereadOwed {
			l.fu.owe(time.Now())
		}
		if res.Published > 0 {
			w.cad.noteActivity(time.Now())
			l.fu.schedule(time.Now(), p.cfg.OverlapFollowUps)
			if p.cfg.OnPublished != nil {
				p.cfg.OnPublished(res.Published)
			}
		}
		w.cad.noteCycle(res.Err != nil)
		// A stop is reported even when ctx ended meanwhile: the status
		// already says so, and the caller must learn why.
		if res.Stopped {
			w.log.ErrorContext(ctx, "poller: stopped polling this workspace", "error", res.Err)
			l.end(res.Err)
			return
		}
		if ctx.Err() != nil {
			l.end(nil)
			return
		}
		if p.cfg.RefuseSecondRelay && w.warnedForeign.Load() {
			w.log.ErrorContext(ctx, "poller: stopped polling this workspace: another relay answers it (MOLECULE_SINGLETON=refuse)")
			l.end(ErrSecondRelay)
			return
		}
		l.mu.Lock()
		if !l.heartbeating && w.isReady() && p.cfg.HeartbeatInterval > 0 {
			l.heartbeating = true
			p.startHeartbeats(ctx, w, &l.bg)
		}
		if l.pending {
			l.pending = false
			l.mu.Unlock()
			continue
		}
		if ctx.Err() != nil {
			// ctx ended after the check above; its AfterFunc saw this
			// cycle running and left the end to it.
			l.finished = true
			l.mu.Unlock()
			l.finish(nil)
			return
		}
		l.running = false
		next := p.nextPoll(w, time.Now())
		if due, ok := l.fu.next(); ok {
			next = max(0, min(next, time.Until(due)))
		}
		if retrySooner {
			next = min(next, retryIn)
		}
		l.timer = p.clock.within(next, l.timed) // never later: the safety net's bound
		l.mu.Unlock()
		return
	}
}

// end finishes the loop from its cycle goroutine.
func (l *pollLoop) end(err error) {
	l.mu.Lock()
	if l.finished {
		l.mu.Unlock()
		return
	}
	l.finished = true
	l.mu.Unlock()
	l.finish(err)
}

// finish stops the stream loop and the heartbeats, waits for them, and
// reports.
func (l *pollLoop) finish(err error) {
	l.started()
	l.cancel()
	l.bg.Wait()
	l.done(err)
}
