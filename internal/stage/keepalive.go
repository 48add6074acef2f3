package stage

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeepAlive tells the server every interval that msg is still being worked
// on (InProgress resets its AckWait), until stop is called. progress sends
// an extra InProgress at once, at most once per interval/8 however often it
// is called; it is safe from any goroutine and after stop (then a no-op).
func KeepAlive(msg jetstream.Msg, interval time.Duration) (progress func(), stop func()) {
	k := &keepAlive{}
	k.start(msg, interval)
	return k.progress, k.stop
}

// start begins keeping msg alive (see KeepAlive). A keepAlive is started
// once.
func (k *keepAlive) start(msg jetstream.Msg, interval time.Duration) {
	k.msg, k.interval, k.minGap = msg, interval, interval/8
	k.last.Store(time.Now().UnixNano())
	// A timer rather than a goroutine with a ticker: every message in
	// flight has one, and most finish long before the first tick.
	k.mu.Lock()
	k.timer = time.AfterFunc(interval, k.tick)
	k.mu.Unlock()
}

func (k *keepAlive) progress() { k.send(false) }

type keepAlive struct {
	msg              jetstream.Msg
	interval, minGap time.Duration
	last             atomic.Int64
	stopped          atomic.Bool
	mu               sync.Mutex // orders the timer's re-arming with stop
	timer            *time.Timer
}

func (k *keepAlive) tick() {
	k.send(true)
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped.Load() {
		k.timer.Reset(k.interval)
	}
}

func (k *keepAlive) send(force bool) {
	if k.stopped.Load() {
		return
	}
	now := time.Now().UnixNano()
	prev := k.last.Load()
	if !force && time.Duration(now-prev) < k.minGap {
		return
	}
	if k.last.CompareAndSwap(prev, now) {
		_ = k.msg.InProgress()
	}
}

func (k *keepAlive) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped.Swap(true) {
		return
	}
	k.timer.Stop()
}
