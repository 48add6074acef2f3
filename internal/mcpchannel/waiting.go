package mcpchannel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A session that waits for another's channel says so in the lease bucket,
// next to the lease it waits for, so that the console (issue 40: "which
// holds the channel, which waits") can list it: a key
// <workspace>.waiting.<instance> per workspace (WaitingKey), renewed every
// quarter of WaitingTTL and deleted when the wait ends. The value carries
// its expiry: a waiter that died leaves an entry that readers skip once
// it expired and the next waiter or taker deletes (sweepWaiting). The
// lease's own keys are bare workspace ids, so neither the lease nor its
// release watch (watchReleases) sees these.

// WaitingTTL is how long a waiting entry outlives its last renewal.
const WaitingTTL = 10 * time.Second

// waitingMark is the middle of a waiting key.
const waitingMark = ".waiting."

// WaitingKey is the lease-bucket key in which instance says it waits for
// workspace's channel.
func WaitingKey(workspace, instance string) string { return workspace + waitingMark + instance }

// Waiting is the value of a waiting entry.
type Waiting struct {
	Instance string    `json:"instance"`
	PID      int       `json:"pid"`
	Since    time.Time `json:"since"`
	Expires  time.Time `json:"expires"`
}

// ParseWaitingKey splits a waiting key into its workspace and instance;
// ok is false for any other key (a lease).
func ParseWaitingKey(key string) (workspace, instance string, ok bool) {
	return strings.Cut(key, waitingMark)
}

// markWaiting records that instance waits for each workspace's channel
// until stop, which deletes the entries. A failure to write is not one to
// wait on: the wait goes on unlisted.
func markWaiting(ctx context.Context, js jetstream.JetStream, workspaces []string, instance string, replicas int) (stop func(), err error) {
	kv, err := kvlease.Bucket(ctx, js, events.BucketMCPLeases, max(replicas, 1))
	if err != nil {
		return nil, err
	}
	sweepWaiting(ctx, kv, workspaces, "")
	v := Waiting{Instance: instance, PID: os.Getpid(), Since: time.Now().UTC()}
	put := func(ctx context.Context) error {
		v.Expires = time.Now().Add(WaitingTTL).UTC()
		b, _ := json.Marshal(v)
		for _, ws := range workspaces {
			if _, err := kv.Put(ctx, WaitingKey(ws, instance), b); err != nil {
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
				_ = put(pctx) // the next renewal tries again; expiry bounds a lost one
				cancel()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		for _, ws := range workspaces {
			_ = kv.Delete(dctx, WaitingKey(ws, instance)) // else it expires
		}
	}, nil
}

// sweepWaiting deletes the waiting entries of workspaces that expired, and
// those of instance (a waiter that has the channel now).
func sweepWaiting(ctx context.Context, kv jetstream.KeyValue, workspaces []string, instance string) {
	for _, ws := range workspaces {
		w, err := kv.Watch(ctx, ws+waitingMark+"*", jetstream.IgnoreDeletes())
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
		for _, k := range stale {
			_ = kv.Delete(ctx, k)
		}
	}
}

// waitingInstance names a waiting session: its lease instance when set,
// otherwise a random id (a session waiting for a locked store has no
// runtime yet).
func waitingInstance(cfg LeaseConfig) string {
	if cfg.Instance != "" {
		return cfg.Instance
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
