// When the next poll of a workspace runs (event-stream health, safety net, retry after a failure).

package poller

import (
	"math/rand/v2"
	"sync"
	"time"
)

// The safety-net cadence of Run (docs/performance.md, "An idle fleet").
//
// With SSE on, the event stream announces every inbound message within
// milliseconds and the periodic poll is only a safety net for an event the
// stream missed. While the stream is known to be healthy and the workspace
// has settled, that safety net runs every SafetyNetInterval instead of
// every PollInterval, and reads the state every second time; it returns to
// PollInterval at once when an inbound event arrives, a cycle publishes,
// a cycle fails, or the stream ends or goes silent.
//
// "Healthy" is proven, not assumed: the platform echoes every heartbeat on
// the workspace's own stream (WORKSPACE_HEARTBEAT, docs/protocol.md §3), so
// a stream that delivered no event within heartbeatEchoGrace of an
// accepted heartbeat is silent (a dead TCP path, a proxy that buffers):
// the poller polls fast and reopens it. A platform that does not echo
// heartbeats never looks healthy and is polled every PollInterval, as
// before.
//
// "Settled" means an overlap re-read ran more than lateCommitMargin after
// the last inbound activity, so that rows the platform committed late
// behind the cursor (docs/protocol.md §4) have been looked for before the
// cadence slows: the overlap only looks OverlapWindow back. While settled,
// the overlap re-read itself is skipped: with no inbound activity since the
// last one there is no row to commit late.

const (
	// DefaultSafetyNetInterval is Config.SafetyNetInterval's default.
	DefaultSafetyNetInterval = 2 * time.Minute
	// heartbeatEchoGrace is how long after an accepted heartbeat its
	// WORKSPACE_HEARTBEAT may take to arrive on the stream (measured: about
	// 1 ms) before the stream counts as silent; at most half the heartbeat
	// interval.
	heartbeatEchoGrace = 10 * time.Second
	// lateCommitMargin is how long after the last inbound activity an
	// overlap re-read must start to count as covering its late commits
	// (measured lags are well under a second); at most half OverlapEvery.
	lateCommitMargin = 5 * time.Second
	// safetyNetJitter spreads the safety-net polls of a fleet (±10 %), so
	// that a thousand workspaces started together do not poll together.
	safetyNetJitter = 0.1
)

// cadence is what Run knows of one workspace's event stream and inbound
// activity, to choose the next poll.
type cadence struct {
	mu sync.Mutex
	// streamAt is when the current stream was asked for; zero while none
	// is open. eventAt is the last event on any stream.
	streamAt, eventAt time.Time
	// heartbeatAt is when the last heartbeat the platform accepted was
	// sent; echoed: an event arrived after some heartbeat (the platform
	// echoes them, so silence after one means a silent stream).
	heartbeatAt time.Time
	echoed      bool
	// activityAt is the last inbound activity: an ACTIVITY_LOGGED wake-up,
	// a cycle that published, or the start of Run. overlapAt is when this
	// process's last overlap re-read started; failed: its last cycle
	// failed.
	activityAt, overlapAt time.Time
	failed                bool
	// slow: Run's last wait was a safety-net one (nextPoll).
	slow bool
	// reopen ends the current stream so that sseLoop opens a new one.
	reopen func()
}

func (c *cadence) streamOpening(now time.Time, reopen func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streamAt, c.reopen = now, reopen
}

func (c *cadence) streamClosed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streamAt, c.reopen = time.Time{}, nil
}

func (c *cadence) noteEvent(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventAt = now
	if !c.heartbeatAt.IsZero() && now.After(c.heartbeatAt) {
		c.echoed = true
	}
}

func (c *cadence) noteHeartbeat(sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heartbeatAt = sent
	// The echo is published while the platform handles the heartbeat, so
	// it often arrives before the answer, and before this note.
	if c.eventAt.After(sent) {
		c.echoed = true
	}
}

func (c *cadence) noteActivity(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.After(c.activityAt) {
		c.activityAt = now
	}
}

func (c *cadence) noteOverlap(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.overlapAt = now
}

func (c *cadence) noteCycle(failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed = failed
}

// silentLocked: the stream delivered nothing since a heartbeat the platform
// accepted more than heartbeatEchoGrace ago.
func (c *cadence) silentLocked(now time.Time, grace time.Duration) bool {
	return !c.heartbeatAt.IsZero() && !c.eventAt.After(c.heartbeatAt) && now.Sub(c.heartbeatAt) > grace
}

// healthyLocked: a stream is open, has delivered an event since it was
// asked for, and is not silent.
func (c *cadence) healthyLocked(now time.Time, grace time.Duration) bool {
	return !c.streamAt.IsZero() && c.eventAt.After(c.streamAt) && !c.silentLocked(now, grace)
}

// settled: the stream is healthy (no heartbeat unechoed for longer than
// grace), the last cycle succeeded, and the overlap re-read (overlapOn)
// started more than margin after the last inbound activity; without an
// overlap re-read, no activity for quiet.
func (c *cadence) settled(now time.Time, grace time.Duration, overlapOn bool, margin, quiet time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed || !c.healthyLocked(now, grace) {
		return false
	}
	if overlapOn {
		return c.overlapAt.After(c.activityAt.Add(margin))
	}
	return now.Sub(c.activityAt) >= quiet
}

// reopenIfSilent ends a stream that went silent on a platform known to echo
// heartbeats; true if it did.
func (c *cadence) reopenIfSilent(now time.Time, grace time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reopen == nil || !c.echoed || !c.silentLocked(now, grace) {
		return false
	}
	c.reopen()
	c.reopen = nil
	return true
}

// backsOff reports whether Run slows its safety net at all: SSE on and a
// safety-net interval longer than the poll interval.
func (p *Poller) backsOff(w *workspace) bool {
	return p.cfg.SSE && w.pushURL == "" && p.cfg.SafetyNetInterval > p.cfg.PollInterval
}

// isSettled is cadence.settled with the poller's configuration.
func (p *Poller) isSettled(w *workspace, now time.Time) bool {
	return p.backsOff(w) && w.cad.settled(now, p.echoGrace(), p.cfg.OverlapWindow > 0,
		min(lateCommitMargin, p.cfg.OverlapEvery/2), p.cfg.OverlapEvery)
}

func (p *Poller) echoGrace() time.Duration { return min(heartbeatEchoGrace, p.cfg.HeartbeatInterval/2) }

// nextPoll is the wait before Run's next cycle of w. The first wait of a
// slow spell is drawn from the whole safety-net interval, so that a fleet
// that settled together (started together) spreads its safety-net polls
// over the interval instead of polling in bursts; later ones are the
// interval ±10 %. Fast waits are 90–100 % of the poll interval, never
// longer, which spreads a fleet's fast polls too.
func (p *Poller) nextPoll(w *workspace, now time.Time) time.Duration {
	settled := p.isSettled(w, now)
	w.cad.mu.Lock()
	wasSlow := w.cad.slow
	w.cad.slow = settled
	w.cad.mu.Unlock()
	switch {
	case !settled:
		return time.Duration(float64(p.cfg.PollInterval) * (1 - safetyNetJitter*rand.Float64()))
	case !wasSlow:
		return p.cfg.PollInterval + time.Duration(rand.Int64N(int64(p.cfg.SafetyNetInterval-p.cfg.PollInterval)+1))
	}
	return jitter(p.cfg.SafetyNetInterval, safetyNetJitter)
}

// stateDue reports whether Run's next cycle reads the state: when the last
// read is older than the poll interval, or, settled, than one and a half
// safety-net intervals (every second safety-net poll). A wake-up is
// activity, so a message announced on the stream always reads a state
// older than the poll interval first.
func (p *Poller) stateDue(w *workspace, now time.Time) bool {
	every := p.cfg.PollInterval
	if p.isSettled(w, now) {
		every = p.cfg.SafetyNetInterval * 3 / 2
	}
	return w.stateAge() >= every
}

// overlapNeedless: Run is settled, so no inbound row arrived since the last
// overlap re-read and none can have committed late behind the cursor.
func (p *Poller) overlapNeedless(w *workspace, now time.Time) bool {
	return p.isSettled(w, now)
}

// jitter returns d scaled by a random factor in [1-f, 1+f].
func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*rand.Float64()))
}

// firstRetryDelay is the wait before the cycle after a failed one; it
// doubles with each further failure up to the poll interval.
//
// Why: a failed cycle (a NATS request to a leader being elected, a
// platform 5xx, a dropped connection) used to wait a whole PollInterval
// (5 s) for the next try, so a blip of a few hundred milliseconds cost
// every message queued meanwhile 5 s. Most such failures are over within
// a second. A 429 is paced separately (pace waits out its Retry-After),
// so retrying sooner never sends a request the platform asked us not to.
const firstRetryDelay = 250 * time.Millisecond

// failRetry is the wait before the next cycle of one workspace's Run loop.
type failRetry struct{ next time.Duration }

// after records a cycle's outcome and says when to try again: after a
// failure, the current delay (250 ms, 500 ms, 1 s, … capped at interval)
// and true while it is shorter than interval; after a success, false (the
// poll timer decides) and the delays start over.
func (f *failRetry) after(err error, interval time.Duration) (time.Duration, bool) {
	if err == nil {
		f.next = 0
		return 0, false
	}
	if f.next == 0 {
		f.next = firstRetryDelay
	}
	d := min(f.next, interval)
	f.next = min(2*f.next, interval)
	return d, d < interval
}
