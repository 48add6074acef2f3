// The workspace's heartbeats: their body, timer and record.

package poller

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// cycleHeartbeat sends the cycle's heartbeat; true ends the cycle (the
// token was refused).
func (p *Poller) cycleHeartbeat(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	ok, status, herr := p.heartbeat(ctx, w)
	res.Heartbeat = ok
	if errors.Is(herr, molecule.ErrUnauthorized) {
		p.unauthorized(ctx, w, herr, res, set)
		return true
	}
	set(heartbeatSetter(status, herr))
	return false
}

// heartbeat sends the full heartbeat body. Heartbeats never wait for the
// rate budget: the budget reserve exists for them.
func (p *Poller) heartbeat(ctx context.Context, w *workspace) (ok bool, status string, err error) {
	rate, sample := w.errorRate()
	active, current, known := p.tasksOf(ctx, w)
	w.busyReported.Store(known && active > 0)
	hb := molecule.Heartbeat{
		ActiveTasks:        active,
		CurrentTask:        current,
		UptimeSeconds:      int64(time.Since(p.start).Seconds()),
		ErrorRate:          rate,
		SampleError:        sample,
		Capabilities:       p.cfg.Capabilities,
		IdleTimeoutSeconds: p.cfg.IdleTimeoutSeconds,
		InstanceID:         p.cfg.InstanceID,
	}
	r, err := w.c.Heartbeat(ctx, hb)
	if err != nil {
		if ctx.Err() == nil {
			w.hbErrs.failed(ctx, w.log, "poller: heartbeat failed; without heartbeats the workspace goes offline", err)
		}
		return false, "", err
	}
	w.hbErrs.ok(ctx, w.log, "poller: heartbeats work again")
	return true, r.Status, nil
}

func heartbeatSetter(status string, err error) func(*statusRecord) {
	now := time.Now().UTC()
	return func(r *statusRecord) {
		r.LastHeartbeatAt = now
		r.HeartbeatStatus, r.HeartbeatError = status, ""
		if err != nil {
			r.HeartbeatStatus, r.HeartbeatError = "", err.Error()
		}
	}
}

// tasksOf is what the heartbeat says w is doing: this process's handlers
// for it (Config.Tasks), else the relay's load (activeTasks).
func (p *Poller) tasksOf(ctx context.Context, w *workspace) (n int, current string, known bool) {
	if p.cfg.Tasks != nil {
		if n, current, known = p.cfg.Tasks.Running(w.id); known {
			return n, current, true
		}
	}
	return p.activeTasks(ctx), "", false
}

// activeTasks is the dispatcher consumer's ack-pending count: messages
// handed to a handler and not finished. The consumer is shared by every
// workspace, so it is the relay's load, not this workspace's alone.
//
// The answer is shared by every workspace's heartbeat for
// activeTasksFresh: a fleet of a thousand workspaces would otherwise ask
// the JetStream API 33 times a second for the same number.
func (p *Poller) activeTasks(ctx context.Context) int {
	if p.topo.Dispatcher == nil {
		return 0
	}
	p.tasksMu.Lock()
	defer p.tasksMu.Unlock()
	if !p.tasksAt.IsZero() && time.Since(p.tasksAt) < activeTasksFresh {
		return p.tasks
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := p.topo.Dispatcher.Info(ictx)
	if err != nil {
		info = p.topo.Dispatcher.CachedInfo()
	}
	p.tasks, p.tasksAt = 0, time.Now()
	if info != nil {
		p.tasks = info.NumAckPending
	}
	return p.tasks
}

// activeTasksFresh is how long one reading of the dispatcher's ack-pending
// count serves every heartbeat.
const activeTasksFresh = 5 * time.Second

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
