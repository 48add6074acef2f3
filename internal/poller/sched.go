// The fleet's clock and workers, which run every workspace's timed work.

package poller

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"
)

// fleetClock runs a poller's timed work (heartbeats, polls) for all its
// workspaces from one goroutine over a heap of due times, and hands what is
// due to long-lived workers (workerPool). Per-workspace time.AfterFunc
// timers woke the process about 40 times a second at a thousand
// workspaces and started a goroutine for each, whose stack grew anew
// every time: together a fifth of the idle relay's CPU
// (docs/performance.md, "An idle fleet"). Long delays (clockGridFrom and
// more: heartbeats, poll and safety-net intervals) are rounded to a
// clockGrid boundary, so that the work due within one grid step runs
// after one wake-up: a heartbeat's up (after: never early, or the next
// one would come twice), a poll's down (within: the safety net's bound,
// 1.1 × its interval, holds as documented). Shorter ones (retries,
// overlap re-reads) run on time.
//
// The clock's goroutine runs only while something is scheduled.
type fleetClock struct {
	pool *workerPool
	// grid and gridFrom are clockGrid and clockGridFrom (shorter in tests).
	grid, gridFrom time.Duration

	mu      sync.Mutex
	due     clockHeap
	running bool          // the clock's goroutine is alive
	kick    chan struct{} // an earlier entry was added
}

const (
	// clockGrid is the step long delays are rounded up to: a heartbeat or
	// safety-net poll may run this much later than asked.
	clockGrid = 250 * time.Millisecond
	// clockGridFrom is the shortest delay rounded to the grid (20 steps,
	// so a delay grows by at most 5 %).
	clockGridFrom = 20 * clockGrid
)

func newFleetClock() *fleetClock {
	return &fleetClock{pool: newWorkerPool(workerIdle), grid: clockGrid, gridFrom: clockGridFrom, kick: make(chan struct{}, 1)}
}

// clockEntry is one scheduled call; stop cancels it.
type clockEntry struct {
	c     *fleetClock
	at    time.Time
	f     func()
	index int // in the heap; -1 once taken out (run or stopped)
}

// after calls f on a worker once d has passed (rounded up to the grid when
// d is long).
func (c *fleetClock) after(d time.Duration, f func()) *clockEntry {
	return c.scheduleIn(d, f, func(at time.Time) time.Time { return gridUp(at, c.grid) })
}

// within calls f on a worker once d has passed, or up to one grid step
// sooner when d is long (rounded down to the grid).
func (c *fleetClock) within(d time.Duration, f func()) *clockEntry {
	return c.scheduleIn(d, f, func(at time.Time) time.Time { return at.Truncate(c.grid) })
}

// scheduleIn schedules f d from now, moved to the grid boundary round
// gives when d is long.
func (c *fleetClock) scheduleIn(d time.Duration, f func(), round func(time.Time) time.Time) *clockEntry {
	at := time.Now().Add(d)
	if d >= c.gridFrom {
		at = onGrid(at, round(at))
	}
	return c.schedule(at, f)
}

// onGrid moves at to the wall-clock time boundary while keeping its
// monotonic reading: the heap orders, and the clock waits, by the
// monotonic clock, so a step of the wall clock (NTP) delays no heartbeat.
func onGrid(at, boundary time.Time) time.Time { return at.Add(boundary.Sub(at)) }

func (c *fleetClock) schedule(at time.Time, f func()) *clockEntry {
	e := &clockEntry{c: c, at: at, f: f}
	c.mu.Lock()
	heap.Push(&c.due, e)
	first := e.index == 0
	start := !c.running
	c.running = true
	c.mu.Unlock()
	switch {
	case start:
		go c.loop()
	case first:
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return e
}

// gridUp rounds t up to the next boundary of grid.
func gridUp(t time.Time, grid time.Duration) time.Time {
	r := t.Truncate(grid)
	if r.Before(t) {
		r = r.Add(grid)
	}
	return r
}

// stop takes e off the clock. It reports whether that kept its call from
// running (false: it runs or ran already, or was stopped before), as
// time.Timer.Stop does.
func (e *clockEntry) stop() bool {
	c := e.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.index < 0 {
		return false
	}
	heap.Remove(&c.due, e.index)
	return true
}

// loop waits for the earliest entry, hands every entry then due to the
// pool, and ends once nothing is scheduled.
func (c *fleetClock) loop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		c.mu.Lock()
		now := time.Now()
		var ready []func()
		for len(c.due) > 0 && !c.due[0].at.After(now) {
			ready = append(ready, heap.Pop(&c.due).(*clockEntry).f)
		}
		if len(c.due) == 0 && len(ready) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		wait := time.Duration(-1)
		if len(c.due) > 0 {
			wait = c.due[0].at.Sub(now)
		}
		c.mu.Unlock()
		for _, f := range ready {
			c.pool.run(f)
		}
		if wait < 0 {
			continue // the heap emptied: the next turn ends the loop unless an entry came
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-c.kick:
		}
	}
}

// clockHeap orders entries by due time (container/heap).
type clockHeap []*clockEntry

func (h clockHeap) Len() int           { return len(h) }
func (h clockHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h clockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *clockHeap) Push(x any) {
	e := x.(*clockEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *clockHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}

// workerIdle is how long a worker waits for its next job before it ends:
// an idle fleet's jobs come several times a second, so a few workers live
// on with their grown stacks, while the start's burst of a thousand first
// cycles does not leave a thousand behind.
const workerIdle = 10 * time.Second

// workerPool runs jobs on long-lived goroutines: a job goes to a worker
// waiting for one, or, when none waits, to a new worker at once (a job
// never queues: an SSE wake-up's cycle must start now, and a slow
// platform must not hold heartbeats back).
type workerPool struct {
	jobs    chan func()
	idle    time.Duration
	workers atomic.Int64 // long-lived workers alive
}

// maxWorkers caps the long-lived workers. workerIdle alone does not end
// a burst's workers when jobs keep coming: at 10,000 workspaces (about
// 400 heartbeats and polls a second) a job reached each of the start's
// 2,367 workers within 10 s, and they all lived on with their stacks
// (docs/fleet.md). An idle fleet's jobs are short and spread over the
// clock's grid steps; a job beyond the cap gets a goroutine of its own,
// so none ever waits.
const maxWorkers = 64

func newWorkerPool(idle time.Duration) *workerPool {
	return &workerPool{jobs: make(chan func()), idle: idle}
}

func (p *workerPool) run(f func()) {
	select {
	case p.jobs <- f:
	default:
		if p.workers.Add(1) > maxWorkers {
			p.workers.Add(-1)
			go f() // beyond the cap: a goroutine for this job only
			return
		}
		go p.work(f)
	}
}

func (p *workerPool) work(f func()) {
	defer p.workers.Add(-1)
	f()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		select {
		case f := <-p.jobs:
			f()
			t.Reset(p.idle)
		case <-t.C:
			return
		}
	}
}
