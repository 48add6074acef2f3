package poller

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Entries run once each, not before they are due, and a stopped one never.
func TestFleetClockRunsDueEntriesOnceAndStoppedOnesNever(t *testing.T) {
	c := newFleetClock()
	start := time.Now()
	var mu sync.Mutex
	ran := map[int]time.Duration{}
	var wg sync.WaitGroup
	for i, d := range []time.Duration{60, 10, 40, 20} {
		wg.Add(1)
		c.after(d*time.Millisecond, func() {
			defer wg.Done()
			mu.Lock()
			ran[i] += time.Since(start) // a second run would add up past the check below
			mu.Unlock()
		})
	}
	var stoppedRan atomic.Bool
	stopped := c.after(30*time.Millisecond, func() { stoppedRan.Store(true) })
	if !stopped.stop() {
		t.Fatal("stop of a pending entry reported that its call runs anyway")
	}
	if stopped.stop() {
		t.Fatal("a second stop reported that it kept the call from running")
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // room for a wrong second run or the stopped one
	mu.Lock()
	defer mu.Unlock()
	for i, d := range []time.Duration{60, 10, 40, 20} {
		if got := ran[i]; got < d*time.Millisecond || got > d*time.Millisecond+10*time.Second {
			t.Errorf("entry %d (after %dms) ran at %s", i, d, got)
		}
	}
	if stoppedRan.Load() {
		t.Error("a stopped entry ran")
	}
}

// The clock's goroutine runs only while something is scheduled, and comes
// back for the next entry.
func TestFleetClockEndsWhenNothingIsScheduledAndRestarts(t *testing.T) {
	c := newFleetClock()
	for round := range 2 {
		done := make(chan struct{})
		c.after(time.Millisecond, func() { close(done) })
		<-done
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.mu.Lock()
			running := c.running
			c.mu.Unlock()
			if !running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the clock's goroutine still runs with nothing scheduled", round)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// Long delays are rounded to the grid, so that a fleet's heartbeats and
// safety-net polls due within one step run after one wake-up: a
// heartbeat's up, a poll's down (never later than the safety net's
// bound); short ones (retries, quick re-reads) are not delayed.
func TestLongDelaysShareAGridStep(t *testing.T) {
	c := newFleetClock()
	var entries []*clockEntry
	defer func() {
		for _, e := range entries {
			e.stop()
		}
	}()
	before := time.Now()
	for _, d := range []time.Duration{clockGridFrom, clockGridFrom + clockGrid/3, clockGridFrom + clockGrid/2} {
		e := c.after(d, func() {})
		entries = append(entries, e)
		if !e.at.Truncate(clockGrid).Equal(e.at) {
			t.Errorf("a %s delay is due at %s, not on a %s boundary", d, e.at.Format(time.StampMicro), clockGrid)
		}
		if e.at.Before(before.Add(d)) || e.at.After(time.Now().Add(d+clockGrid)) {
			t.Errorf("a %s delay is due %s from its start, want %s to %s more", d, e.at.Sub(before), d, d+clockGrid)
		}
	}
	// A poll (within) is rounded down: never later than asked.
	for _, d := range []time.Duration{clockGridFrom, clockGridFrom + clockGrid/3} {
		asked := time.Now().Add(d)
		e := c.within(d, func() {})
		entries = append(entries, e)
		if !e.at.Truncate(clockGrid).Equal(e.at) || e.at.After(asked) || e.at.Before(asked.Add(-clockGrid)) {
			t.Errorf("a poll within %s is due %s before the time asked, want 0 to %s, on a boundary", d, asked.Sub(e.at), clockGrid)
		}
	}
	// The clock waits by the monotonic clock: a step of the wall clock
	// must not delay a heartbeat.
	for _, e := range entries {
		if e.at.Round(0) == e.at {
			t.Errorf("an entry due %s lost its monotonic clock reading", e.at)
		}
	}
	short := c.after(clockGrid/5, func() {})
	entries = append(entries, short)
	if short.at.After(time.Now().Add(clockGrid / 5)) {
		t.Errorf("a %s delay was put off to %s", clockGrid/5, short.at.Sub(before))
	}
}

// A job never waits for a busy worker: it starts at once on a new one (an
// SSE wake-up's cycle must not wait behind a slow heartbeat), and an idle
// worker takes the next job.
func TestWorkerPoolNeverQueuesAJob(t *testing.T) {
	p := newWorkerPool(time.Minute)
	release := make(chan struct{})
	busy := make(chan struct{})
	p.run(func() { close(busy); <-release })
	<-busy
	ran := make(chan struct{})
	p.run(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a job waited for the busy worker")
	}
	close(release)
}

// A burst larger than maxWorkers runs at once, every job on a goroutine,
// but leaves at most maxWorkers long-lived workers behind: with jobs
// coming steadily (a big fleet's heartbeats) workerIdle would never end
// the rest.
func TestWorkerPoolBurstLeavesAtMostMaxWorkers(t *testing.T) {
	p := newWorkerPool(time.Minute)
	const burst = 4 * maxWorkers
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(burst)
	for range burst {
		p.run(func() { started.Done(); <-release })
	}
	waited := make(chan struct{})
	go func() { started.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("a job of the burst waited")
	}
	close(release)
	if n := p.workers.Load(); n > maxWorkers {
		t.Errorf("%d long-lived workers after a burst of %d; at most %d", n, burst, maxWorkers)
	}
}
