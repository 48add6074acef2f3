package stage

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

// poolOptions shape one pull loop.
type poolOptions struct {
	// idle, when positive, makes the loop a drain: it stops fetching once
	// no message arrived for idle and nothing is in flight.
	idle time.Duration
	// maxWait, when set, is asked right before each pull (after the free
	// slots for it were taken) how long the pull may wait; a value <= 0
	// stops fetching (the start-margin rule).
	maxWait func() time.Duration
	// emptied, when set, makes the drain end as soon as it says so with
	// nothing in flight (until empty: see untilEmpty); idle then bounds
	// only the wait for what the consumer holds and does not deliver.
	emptied func(context.Context) (bool, error)
}

// pullEndMargin is added to a hand-back's delay so that the message comes
// back after the server has ended the pull it was delivered to.
const pullEndMargin = 100 * time.Millisecond

// pool is one run of the pull loop: it fetches from a durable consumer with
// a bounded buffer and processes each message on a worker goroutine.
//
// Bounded buffer: a message counts against Concurrency from the moment it
// is fetched until its processing returned (after its ack, nak or term).
// Each pull asks for exactly as many messages as there are free slots, so
// no message ever waits in a client buffer while its AckWait runs.
// Consumer.Consume and Consumer.Messages pre-fetch up to PullMaxMessages
// beyond what is being processed and re-pull at a threshold, so messages
// can sit in the buffer past AckWait and be redelivered to another worker
// while still queued here (nats.go#1929); that is why this loop uses Fetch.
type pool struct {
	cons     jetstream.Consumer
	cfg      Config
	opts     poolOptions
	process  func(msg jetstream.Msg, park func(func()))
	parkFn   func(func()) // p.park, bound once rather than per message
	log      *slog.Logger
	sem      chan struct{}
	wg       sync.WaitGroup // messages in flight
	inflight atomic.Int64
	// work hands a fetched message to an idle worker (idle counts those
	// that will still take one); quit, closed when the run ends, stops
	// them; workers counts them.
	work     chan jetstream.Msg
	idle     atomic.Int64
	quit     chan struct{}
	workers  sync.WaitGroup
	lastMsg  time.Time
	failures int
	// In a drain until empty: settled is signalled when a message in
	// flight is done; next is the next pull's wait (0: take what is there
	// and return at once), growing while the consumer holds messages it
	// does not deliver.
	settled chan struct{}
	next    time.Duration
}

// runPool fetches from cons and calls process for each message on a
// worker goroutine, never more than cfg.Concurrency at once, until ctx ends (or,
// in drain mode, the queue stays empty; or maxWait says stop). It then
// waits for every process call to return and flushes the connection.
// Messages a pull delivers after the stop began are handed back for
// redelivery elsewhere once that pull has ended (pull). It returns nil on a stop by ctx, idle or maxWait,
// and the error when the connection is closed under it.
func runPool(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, cfg Config, opts poolOptions, process func(jetstream.Msg, func(func()))) error {
	p := &pool{cons: cons, cfg: cfg, opts: opts, process: process, log: cfg.Logger,
		sem: make(chan struct{}, cfg.Concurrency), lastMsg: time.Now(),
		work: make(chan jetstream.Msg), quit: make(chan struct{}), settled: make(chan struct{}, 1)}
	p.parkFn = p.park
	err := p.loop(ctx)
	p.wg.Wait()
	close(p.quit)
	p.workers.Wait()
	if nc := js.Conn(); nc != nil && !nc.IsClosed() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = nc.FlushWithContext(fctx)
		cancel()
	}
	return err
}

// loop pulls until a stop; it returns the error that closed the
// connection, if that was the stop.
func (p *pool) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		n, ok := p.takeSlots(ctx)
		if !ok {
			return nil
		}
		// Only now, with the slots held, is it known how long the pull
		// may wait: the wait for a slot can outlast the admission cut-off.
		wait, ok := pullWait(ctx, p.cfg, p.opts)
		if !ok {
			p.release(n)
			return nil
		}
		if p.opts.emptied != nil {
			wait = min(wait, p.next)
		}
		got, err := p.pull(ctx, n, wait)
		if errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
		if err != nil {
			p.failures++
			// While a cluster elects the consumer's leader, every pull
			// fails ("no responders available for request", or a pull
			// that times out at a leader that died) for the seconds the
			// election takes; the next pull goes to the same subject and
			// reaches the new leader. Said once at the start of an outage
			// and then every tenth failure, not every 100 ms.
			if p.failures == 1 || p.failures%10 == 0 {
				p.log.WarnContext(ctx, "stage: pull failed; retrying (a consumer without a leader, during a NATS failover, answers nothing until one is elected)",
					"error", err, "failures", p.failures)
			}
			if !sleep(ctx, backoffDelay(p.failures)) {
				return nil
			}
			continue
		}
		if p.failures > 0 {
			p.log.InfoContext(ctx, "stage: pulls work again", "failed_pulls", p.failures)
		}
		p.failures = 0
		if p.opts.emptied != nil {
			if p.untilEmpty(ctx, got) {
				return nil
			}
			continue
		}
		if p.opts.idle > 0 && got == 0 && p.inflight.Load() == 0 && time.Since(p.lastMsg) >= p.opts.idle {
			return nil
		}
	}
	return nil
}

// untilEmpty decides, in a drain until empty, after a pull that got got
// messages, whether the drain is done, and sets the next pull's wait.
// Nothing but this drain changes the queue, so it is empty when the
// consumer says so (emptied); a message just published may not be
// offered to it yet, an ack sent a moment ago may not be counted yet
// (unconfirmed acks), and a retry may wait for its redelivery: each is
// waited for with pulls of growing waits, for at most idle after the
// last message.
func (p *pool) untilEmpty(ctx context.Context, got int) bool {
	switch {
	case got > 0:
		p.next = 0
		return false
	case p.inflight.Load() > 0:
		// What is in flight may hand its message back: look again when
		// one is done, or after a pull's wait (a redelivery that came
		// meanwhile). idle counts from then.
		p.next = 0
		t := time.NewTimer(p.cfg.FetchWait)
		defer t.Stop()
		select {
		case <-p.settled:
		case <-t.C:
		case <-ctx.Done():
		}
		p.lastMsg = time.Now()
		return false
	}
	empty, err := p.opts.emptied(ctx)
	if empty {
		return true
	}
	if err != nil && ctx.Err() == nil {
		p.log.WarnContext(ctx, "stage: stream or consumer info failed; draining until the queue stays empty for idle", "error", err)
	}
	left := p.opts.idle - time.Since(p.lastMsg)
	if left <= 0 {
		return true
	}
	p.next = min(max(2*p.next, untilEmptyFirstWait), left)
	return false
}

// untilEmptyFirstWait is the first pull's wait in a drain until empty
// when the consumer still holds what it does not deliver: time for the
// server to count an ack just sent.
const untilEmptyFirstWait = 5 * time.Millisecond

// takeSlots takes one slot (blocking), then every free one up to
// FetchBatch; false when ctx ended first.
func (p *pool) takeSlots(ctx context.Context) (int, bool) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
	for n < p.cfg.FetchBatch {
		select {
		case p.sem <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

func (p *pool) release(n int) {
	for range n {
		<-p.sem
	}
}

// pull fetches up to n messages (holding n slots) and starts their
// processing; it gives back the slots it did not use. The error is the
// fetch's or the pull's end, except a cancellation by the stop.
//
// A stop does not sit out the pull's wait (up to FetchWait): a stop must
// fit a supervisor's grace (Claude Code: SIGKILL 500 ms after SIGINT).
// pull returns at once and the rest of the pull is handed back as it
// arrives, until the pull ends or the connection closes (a message sent to
// a closed connection is redelivered after AckWait).
//
// A message handed back while the pull is open would come straight back
// into it: a plain Nak let each hand-back (a handler cut by the stop's
// grace, or a message the pull delivered after the stop) bounce between
// the server and this pull, one delivery each time, until MaxDeliver
// dead-lettered a message no handler ever finished (5 deliveries in
// 120 ms, internal/lambdafn TestSIGTERMDuringInvocationCutsItWithinBudget).
// So after a stop the hand-back waits for the pull's end.
func (p *pool) pull(ctx context.Context, n int, wait time.Duration) (got int, err error) {
	pullEnds := time.Now().Add(wait)
	handBack := func(m jetstream.Msg) { _ = m.NakWithDelay(time.Until(pullEnds) + pullEndMargin) }
	batch, err := p.fetch(n, wait)
	if err != nil {
		p.release(n)
		return 0, err
	}
	msgs := batch.Messages()
	for {
		var msg jetstream.Msg
		select {
		case m, ok := <-msgs:
			if !ok {
				p.release(n - got)
				err = batch.Error()
				if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && (ctx.Err() != nil || errors.Is(err, context.Canceled)) {
					err = nil
				}
				return got, err
			}
			msg = m
		case <-ctx.Done():
			p.release(n - got)
			go func() {
				for m := range msgs {
					handBack(m)
				}
			}()
			return got, nil
		}
		got++
		if ctx.Err() != nil {
			handBack(msg)
			<-p.sem
			continue
		}
		p.lastMsg = time.Now()
		p.start(msg)
	}
}

// fetch sends one pull for n messages that waits up to wait for them;
// with a wait of 0 it takes what is there and ends at once.
func (p *pool) fetch(n int, wait time.Duration) (jetstream.MessageBatch, error) {
	if wait <= 0 {
		return p.cons.FetchNoWait(n)
	}
	opts := []jetstream.FetchOpt{jetstream.FetchMaxWait(wait)}
	if hb := pullHeartbeat(wait); hb > 0 {
		opts = append(opts, jetstream.FetchHeartbeat(hb))
	}
	return p.cons.Fetch(n, opts...)
}

// start hands msg to an idle worker, or starts a worker for it.
//
// Workers outlive their message because a goroutine's stack starts small
// and grows by copying: a goroutine per message paid that growth (JSON
// decoding and the NATS client reach well past the initial stack) on
// every message, about 7 % of the relay's CPU under the echo load.
func (p *pool) start(msg jetstream.Msg) {
	p.inflight.Add(1)
	p.wg.Add(1)
	if p.claimIdle() {
		p.work <- msg
		return
	}
	p.workers.Add(1)
	go p.worker(msg)
}

// workerIdle is how long a worker waits for its next message before it
// exits, so that a burst's workers do not outlive it by long.
const workerIdle = 30 * time.Second

// worker processes msg and then every message handed to it, until the
// run ends or none came for workerIdle.
//
// A worker counts itself idle before it gives its slot back, so the
// message fetched with that slot finds it: the next message of a stage
// at Concurrency 1 runs on the same goroutine. Each idle count claimed
// by start is one receive a worker still makes; a worker whose wait
// ended takes its count back before it leaves, or, claimed meanwhile,
// receives first.
func (p *pool) worker(msg jetstream.Msg) {
	defer p.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		p.process(msg, p.parkFn)
		p.idle.Add(1)
		p.done()
		idle.Reset(workerIdle)
		select {
		case msg = <-p.work:
		case <-p.quit:
			return // no message in flight: none can be handed over
		case <-idle.C:
			if p.claimIdle() {
				return
			}
			msg = <-p.work
		}
	}
}

// claimIdle takes one idle count, false when there is none.
func (p *pool) claimIdle() bool {
	for {
		n := p.idle.Load()
		if n == 0 {
			return false
		}
		if p.idle.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// done gives back a processed message's slot.
func (p *pool) done() {
	<-p.sem
	p.inflight.Add(-1)
	select {
	case p.settled <- struct{}{}:
	default:
	}
	p.wg.Done()
}

// park gives the caller's slot back while fn runs and takes one again
// after it, so a message that waits on another message of this consumer
// (a handler awaiting a peer's answer) lets the loop fetch that one.
// Still in flight meanwhile: a drain waits for it.
func (p *pool) park(fn func()) {
	<-p.sem
	defer func() { p.sem <- struct{}{} }()
	fn()
}

// pullWait is how long the next pull may wait, or false when fetching
// must stop (maxWait says so, or ctx's deadline is at hand). It must be
// asked right before the pull.
func pullWait(ctx context.Context, cfg Config, opts poolOptions) (time.Duration, bool) {
	wait := cfg.FetchWait
	if opts.idle > 0 && opts.idle < wait {
		wait = opts.idle
	}
	if opts.maxWait != nil {
		mw := opts.maxWait()
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

// pullHeartbeat is the idle heartbeat a pull of wait asks the server
// for: two fifths of it, none for pulls under half a second. A pull sent
// to a consumer leader that died (or that a cluster is still electing)
// is never answered; without heartbeats nats.go gives it up only at its
// expiry plus a second (2 s for the default FetchWait), and the first
// pull to reach the new leader came that much later. With them the pull
// fails after two missed heartbeats (0.8 s) and the next one is sent.
func pullHeartbeat(wait time.Duration) time.Duration {
	if wait < 500*time.Millisecond {
		return 0
	}
	return wait * 2 / 5
}

// backoffDelay is the pause after failed pulls: 200 ms, 400 ms, then
// 500 ms. A failed pull is a request the server answers at once or a pull
// that already waited FetchWait, so a short pause costs little, and it is
// what bounds the delay between a new consumer leader and the first pull
// that reaches it (it was up to 5 s).
func backoffDelay(failures int) time.Duration {
	d := 100 * time.Millisecond << min(failures, 6)
	return min(d, 500*time.Millisecond)
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
