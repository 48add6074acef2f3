package lambdainvoke

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Invoker is what a Waker calls; *Client implements it.
type Invoker interface {
	Invoke(ctx context.Context, function, invocationType string, payload []byte) ([]byte, error)
}

// WakePayload is the event a wake-up sends; the functions do not interpret
// their event, it only tells a reader of the logs where the call came from.
const WakePayload = `{"source":"molecule-relay.wake"}`

// Waker sends coalesced wake-ups to one function: asynchronous (Event)
// invocations, at most one round in flight and one round per Interval,
// however many times Wake is called. A failed invoke is logged and
// forgotten: a wake-up only shortens the wait for the function's own
// schedule, which stays the safety net. It is safe for concurrent use.
type Waker struct {
	inv      Invoker
	function string
	interval time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	want     int // invocations asked for since the last round
	inflight bool
	last     time.Time
	timer    *time.Timer
	done     chan struct{} // closed when the round in flight ends
	sent     int
	failed   int
}

// NewWaker returns a Waker invoking function through inv. interval is the
// least time between two rounds; if not positive, 1 second.
func NewWaker(inv Invoker, function string, interval time.Duration, log *slog.Logger) *Waker {
	if interval <= 0 {
		interval = time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &Waker{inv: inv, function: function, interval: interval, log: log.With("wake", function)}
}

// Function returns the function the Waker invokes.
func (w *Waker) Function() string { return w.function }

// Wake asks for n concurrent invocations of the function (n < 1 counts as
// 1). Asks that arrive while a round is in flight or within Interval of
// the last one merge into the next round, which invokes the largest n
// asked for. It never blocks on the network.
func (w *Waker) Wake(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = max(w.want, n, 1)
	w.scheduleLocked()
}

// scheduleLocked starts a round now, or arms the timer for the moment the
// interval allows one.
func (w *Waker) scheduleLocked() {
	if w.want == 0 || w.inflight || w.timer != nil {
		return
	}
	if wait := w.interval - time.Since(w.last); wait > 0 {
		w.timer = time.AfterFunc(wait, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.timer = nil
			w.scheduleLocked()
		})
		return
	}
	w.startLocked()
}

func (w *Waker) startLocked() {
	n := w.want
	w.want, w.inflight, w.last = 0, true, time.Now()
	done := make(chan struct{})
	w.done = done
	go func() {
		defer close(done)
		// The round outlives the caller's invocation context on purpose:
		// Flush waits for it before the invocation returns.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sent, failed := 0, 0
		for range n {
			if _, err := w.inv.Invoke(ctx, w.function, Event, []byte(WakePayload)); err != nil {
				failed++
				w.log.Warn("wake-up not sent; the function's schedule will pick the work up", "error", err)
				if ctx.Err() != nil {
					break
				}
				continue
			}
			sent++
		}
		w.log.Debug("wake-up sent", "invocations", sent, "failed", failed)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.inflight = false
		w.sent += sent
		w.failed += failed
		w.scheduleLocked()
	}()
}

// Flush sends an outstanding wake-up now, ignoring the interval, and waits
// for the round in flight, or until ctx ends. A Lambda invocation calls it
// before returning: a frozen execution environment would hold a pending
// wake-up until its next invocation.
func (w *Waker) Flush(ctx context.Context) {
	for {
		w.mu.Lock()
		if w.timer != nil {
			w.timer.Stop()
			w.timer = nil
		}
		if w.want > 0 && !w.inflight {
			w.startLocked()
		}
		done, inflight := w.done, w.inflight
		w.mu.Unlock()
		if !inflight {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
	}
}

// Counts returns how many invocations were sent and how many failed.
func (w *Waker) Counts() (sent, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent, w.failed
}
