package kvlease

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An instance that waits for another's lease says so in the lease's
// bucket, next to the lease: a key <key>.waiting.<instance> per key it
// waits for (WaitingKey), renewed every quarter of WaitingTTL and deleted
// when the wait ends (MarkWaiting). The value carries its expiry: a
// waiter that died leaves an entry that readers skip once it expired and
// the next waiter deletes (SweepWaiting). Lease keys with no dot (the mcp
// command's workspace ids) never collide with these.

// WaitingTTL is how long a waiting entry outlives its last renewal.
const WaitingTTL = 10 * time.Second

// waitingMark is the middle of a waiting key.
const waitingMark = ".waiting."

// WaitingKey is the key in which instance says it waits for key's lease.
func WaitingKey(key, instance string) string { return key + waitingMark + instance }

// ParseWaitingKey splits a waiting key into the lease key and the
// instance; ok is false for any other key (a lease).
func ParseWaitingKey(k string) (key, instance string, ok bool) {
	return strings.Cut(k, waitingMark)
}

// Waiting is the value of a waiting entry. Its Instance and Expires are
// a lease value's fields too.
type Waiting struct {
	Instance string    `json:"instance"`
	PID      int       `json:"pid,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Expires  time.Time `json:"expires"`
}

// MarkWaiting records in kv that instance waits for each key's lease
// until stop, which deletes the entries (within a bounded time: else
// they expire).
func MarkWaiting(ctx context.Context, kv jetstream.KeyValue, keys []string, instance string) (stop func(), err error) {
	SweepWaiting(ctx, kv, keys, "")
	v := Waiting{Instance: instance, PID: os.Getpid(), Since: time.Now().UTC()}
	put := func(ctx context.Context) error {
		v.Expires = time.Now().Add(WaitingTTL).UTC()
		b, _ := json.Marshal(v)
		for _, k := range keys {
			if _, err := kv.Put(ctx, WaitingKey(k, instance), b); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put(ctx); err != nil {
		return nil, err
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(WaitingTTL / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				pctx, cancel := context.WithTimeout(ctx, WaitingTTL/4)
				_ = put(pctx) // the next renewal tries again; the expiry bounds a lost one
				cancel()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		for _, k := range keys {
			_ = kv.Delete(dctx, WaitingKey(k, instance))
		}
	}, nil
}

// SweepWaiting deletes the waiting entries of keys that expired, and
// those of instance when set (a waiter that holds the lease now).
func SweepWaiting(ctx context.Context, kv jetstream.KeyValue, keys []string, instance string) {
	for _, k := range keys {
		w, err := kv.Watch(ctx, k+waitingMark+"*", jetstream.IgnoreDeletes())
		if err != nil {
			return
		}
		var stale []string
		for e := range w.Updates() {
			if e == nil {
				break
			}
			var v Waiting
			if json.Unmarshal(e.Value(), &v) != nil || time.Now().After(v.Expires) || (instance != "" && v.Instance == instance) {
				stale = append(stale, e.Key())
			}
		}
		_ = w.Stop()
		for _, s := range stale {
			_ = kv.Delete(ctx, s)
		}
	}
}
