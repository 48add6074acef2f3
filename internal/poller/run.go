package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
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
	retry failRetry // a failed cycle is tried again sooner (retry.go)
}

// startWorkspace starts w's loop; done is called once with the reason it
// stopped (nil when ctx ended) after its stream loop and heartbeats ended.
//
// At most startConcurrency workspaces start at once: a workspace holds its
// slot from here to the end of its first cycle (register, state, feed,
// first heartbeat). Started all at once, ten thousand workspaces opened
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
		res := p.cycle(ctx, w, cycleOpts{checkState: p.stateDue(w, now), woken: woken, quick: l.fu.take(now)})
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

// startHeartbeats sends a heartbeat now and then every HeartbeatInterval
// until ctx ends, each from the poller's clock (sched.go): between
// heartbeats no goroutine waits, which at a thousand workspaces is a
// thousand stacks fewer. bg counts a heartbeat in flight or scheduled, so that Run returns
// only after the last one. The second heartbeat comes after a random part
// of the interval (half to all of it), so that a fleet started together
// does not heartbeat together (bursts of a thousand requests open a
// connection each). Before each heartbeat it reopens an event stream that
// stayed silent after the last one (cadence.go).
func (p *Poller) startHeartbeats(ctx context.Context, w *workspace, bg *sync.WaitGroup) {
	var (
		mu      sync.Mutex
		timer   *clockEntry
		stopped bool
		due     = time.Now().Add(p.cfg.HeartbeatInterval/2 + time.Duration(rand.Int64N(int64(p.cfg.HeartbeatInterval/2)+1)))
		beat    func()
		watch   func()
	)
	schedule := func(d time.Duration, fn func()) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		bg.Add(1)
		timer = p.clock.after(d, func() { defer bg.Done(); fn() })
	}
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if timer != nil && timer.stop() {
			bg.Done() // its function will not run
		}
	})
	// next waits for the regular heartbeat, or, after one that said the
	// workspace was busy, watches for it to become idle (idleWatch).
	next := func() {
		wait := time.Until(due)
		if w.busyReported.Load() {
			schedule(min(wait, idleWatch), watch)
			return
		}
		schedule(wait, beat)
	}
	beat = func() {
		if ctx.Err() != nil {
			return
		}
		if d, ok := p.heartbeatOnce(ctx, w); ok {
			schedule(d, beat) // a rate-limited heartbeat, sent again sooner
			return
		}
		// As a ticker: the next regular heartbeat, skipping any missed.
		now := time.Now()
		for !due.After(now) {
			due = due.Add(p.cfg.HeartbeatInterval)
		}
		next()
	}
	// watch sends the heartbeat at once when the handlers the last one
	// reported have all finished, so that the platform's is_busy and the
	// canvas's "thinking" (current_task) end with them, not up to an
	// interval later; a workspace that was never busy costs nothing.
	watch = func() {
		if ctx.Err() != nil {
			return
		}
		if n, _, _ := p.cfg.Tasks.Running(w.id); n == 0 || !due.After(time.Now()) {
			beat()
			return
		}
		next()
	}
	bg.Add(1)
	p.clock.pool.run(func() { defer bg.Done(); beat() })
}

// idleWatch is how often a workspace whose last heartbeat said it was
// busy is checked for its handlers having finished (an in-process count).
const idleWatch = time.Second

// heartbeatOnce sends one heartbeat and records it; retry > 0 (ok) asks
// for the next one after retry instead of a whole interval later.
func (p *Poller) heartbeatOnce(ctx context.Context, w *workspace) (retry time.Duration, ok bool) {
	if w.cad.reopenIfSilent(time.Now(), p.echoGrace()) {
		w.log.WarnContext(ctx, "poller: the event stream delivered nothing since the last heartbeat (the platform echoes each one); reopening it and polling every poll interval meanwhile")
	}
	sent := time.Now()
	_, status, err := p.heartbeat(ctx, w)
	if ctx.Err() != nil {
		return 0, false
	}
	if err == nil {
		w.cad.noteHeartbeat(sent)
	}
	// A 401 here is left to the poll loop: after a delete the platform
	// still answers heartbeats 200, and state/activity decide.
	if _, serr := p.updateStatus(ctx, w.id, heartbeatSetter(status, err)); serr != nil && ctx.Err() == nil {
		w.log.WarnContext(ctx, "poller: could not record the heartbeat", "error", serr)
	}
	// A refused heartbeat is sent again after the platform's Retry-After
	// rather than a whole interval later: a workspace without heartbeats
	// goes offline.
	if errors.Is(err, molecule.ErrRateLimited) {
		d := molecule.RetryAfterOf(err)
		if d <= 0 {
			d = defaultRetryAfter
		}
		if d < p.cfg.HeartbeatInterval {
			w.log.WarnContext(ctx, "poller: heartbeat rate-limited; sending it again after the platform's Retry-After", "retry_after", d)
			return d, true
		}
	}
	return 0, false
}

// activityEvent is the part of an ACTIVITY_LOGGED event's data we read.
type activityEvent struct {
	ActivityType string `json:"activity_type"`
	Method       string `json:"method"`
}

// wakeOn reports whether an SSE event announces a row worth polling for now.
func wakeOn(ev molecule.Event) bool {
	if ev.Type != "ACTIVITY_LOGGED" {
		return false
	}
	var d activityEvent
	if json.Unmarshal(ev.Data, &d) != nil {
		return false
	}
	return d.ActivityType == activityType && d.Method != "notify" && d.Method != "chat_upload_receive"
}

// sseLoop holds the workspace's event stream and wakes the poll loop on an
// inbound ACTIVITY_LOGGED (bursts coalesce in the one-slot channel). It
// reconnects with exponential backoff; each connect costs one request of
// the rate budget, so it paces like a fetch.
func (p *Poller) sseLoop(ctx context.Context, w *workspace, l *pollLoop) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 250 * time.Millisecond
	eb.MaxInterval = 30 * time.Second
	eb.MaxElapsedTime = 0 // until ctx ends
	b := backoff.WithContext(eb, ctx)
	var state string // as recorded (streamhealth.go)
	for {
		if err := p.pace(ctx, w); err != nil {
			return
		}
		connected := time.Now()
		if state != StreamReconnecting { // a reconnect is still reconnecting until an event
			state = StreamConnecting
			p.noteStream(ctx, w, state, connected, nil)
		}
		sctx, reopen := context.WithCancel(ctx)
		w.cad.streamOpening(connected, reopen)
		err := w.c.StreamEvents(sctx, func(ev molecule.Event) {
			now := time.Now()
			w.cad.noteEvent(now)
			// After the wake-up below; no write unless the state changed
			// or StatusRefresh passed.
			defer func() { state = StreamConnected; p.noteStream(ctx, w, state, now, nil) }()
			switch ev.Type {
			case sessionResetEvent:
				p.resetSession(ctx, w) // before the new session's first message
				return
			case broadcastEvent:
				// Not a message to this workspace: the cadence stays, the
				// next cycle reads the broadcasts (broadcast.go).
				w.broadcastTexts.note(ev.Data, now)
				w.broadcastAsked.Store(true)
				l.wake()
				return
			}
			// A wake-up already pending covers this event: skip its parse.
			if l.wakePending() {
				return
			}
			// A removal is acted on at once too: the cycle's state read then
			// meets the dead token's 401 and stops the workspace, rather
			// than the next safety-net poll doing so minutes later.
			if wakeOn(ev) || ev.Type == "WORKSPACE_REMOVED" {
				w.cad.noteActivity(now)
				l.wakeByEvent()
			}
		})
		w.cad.streamClosed()
		silent := sctx.Err() != nil
		reopen()
		if ctx.Err() != nil {
			return
		}
		if silent {
			err = errors.New("the stream delivered nothing since a heartbeat the platform echoes; reopened")
		}
		state = StreamReconnecting
		p.noteStream(ctx, w, state, time.Now(), err)
		// A connection that lived a while was healthy: start over.
		if time.Since(connected) > time.Minute {
			b.Reset()
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return
		}
		w.log.DebugContext(ctx, "poller: event stream ended; reconnecting", "error", err, "wait", d)
		// Polls continue on the timer meanwhile, every poll interval (the
		// stream is not healthy); poll once now in case it missed an event.
		l.wake()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// ErrUnknownWorkspace: PollWorkspace was given a workspace the poller was
// not configured with.
var ErrUnknownWorkspace = errors.New("poller: workspace not configured")

// PollWorkspace polls one of the configured workspaces as Run does (poll
// loop, heartbeats, event stream) until ctx ends or the workspace cannot
// be polled any more, and returns after all of it ended: a poller group
// (internal/pollgroup) starts and stops single workspaces with it as they
// move between its members. Each call starts from what the stores hold,
// not from what this process remembered of an earlier call: another
// member may have polled the workspace meanwhile. The error is nil when
// ctx ended; otherwise the reason the workspace stopped.
func (p *Poller) PollWorkspace(ctx context.Context, id string) error {
	var c *molecule.Client
	for _, w := range p.ws {
		if w.id == id {
			c = w.c
		}
	}
	if v, ok := p.added.Load(id); ok {
		c = v.(*molecule.Client)
	}
	if c == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkspace, id)
	}
	p.statusCache.Delete(id)
	w := &workspace{id: id, c: c, log: p.log.With("workspace", id), pushURL: p.cfg.Push[id]}
	done := make(chan error, 1)
	p.startWorkspace(ctx, w, func(err error) { done <- err })
	return <-done
}

// AddClient makes a workspace known to PollWorkspace after New (the
// workspace registry added it while the relay runs); a client added again
// for the same id replaces the earlier one (a new token).
func (p *Poller) AddClient(c *molecule.Client) { p.added.Store(c.WorkspaceID(), c) }

// StartClient polls c's workspace, added while Run runs, until stop is
// called or ctx ends. stop returns once its loop, event stream and
// heartbeats ended: no poll of it runs any more. Messages already
// published are left to the dispatcher and the replier, which answer
// them as any other.
func (p *Poller) StartClient(ctx context.Context, c *molecule.Client) (stop func()) {
	p.AddClient(c)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.PollWorkspace(ctx, c.WorkspaceID()); err != nil {
			p.log.Error("poller: stopped polling this workspace", "workspace", c.WorkspaceID(), "error", err)
		}
	}()
	return func() { cancel(); <-done }
}
