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
	minGap := interval / 8
	var last atomic.Int64
	var stopped atomic.Bool
	done := make(chan struct{})
	send := func(force bool) {
		if stopped.Load() {
			return
		}
		now := time.Now().UnixNano()
		prev := last.Load()
		if !force && time.Duration(now-prev) < minGap {
			return
		}
		if last.CompareAndSwap(prev, now) {
			_ = msg.InProgress()
		}
	}
	last.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				send(true)
			}
		}
	}()
	var once sync.Once
	return func() { send(false) }, func() {
		once.Do(func() {
			stopped.Store(true)
			close(done)
		})
	}
}
