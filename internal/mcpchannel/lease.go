package mcpchannel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrAlreadyRunning is returned by Acquire when another instance holds a
// live lease on one of the workspaces.
var ErrAlreadyRunning = errors.New("mcpchannel: another molecule-relay mcp instance serves this workspace")

// HeldError is Acquire's refusal when another instance holds a live lease
// (its Key is the workspace id); the error Acquire returns wraps it and
// matches ErrAlreadyRunning.
type HeldError = kvlease.HeldError

// watchReleases signals on the returned channel when a lease of one of the
// workspaces is deleted (its holder stopped), so that a waiting instance
// tries again at once instead of polling; stop ends the watch.
func watchReleases(ctx context.Context, js jetstream.JetStream, workspaces []string) (released <-chan struct{}, stop func(), err error) {
	kv, err := js.KeyValue(ctx, events.BucketMCPLeases)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	// A copy: WatchFiltered (nats.go v1.55.0) rewrites the keys it is
	// given into subjects, in place, and these are the session's own.
	w, err := kv.WatchFiltered(wctx, slices.Clone(workspaces), jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		cancel()
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	go func() {
		for e := range w.Updates() {
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, func() { _ = w.Stop(); cancel() }, nil
}

// DefaultLeaseTTL is how long a lease outlives its last renewal: a crashed
// instance blocks its workspaces at most this long (on a shared NATS; on
// the embedded server the store's lock dies with the process, see
// LeaseConfig.Exclusive). It is renewed every quarter of it, so a session
// that follows a SIGKILLed one takes over within about 2 s.
const DefaultLeaseTTL = kvlease.DefaultTTL

// Lease is one instance's hold on its workspaces: a key per workspace in
// the events.BucketMCPLeases bucket (internal/kvlease).
type Lease = kvlease.Lease

// LeaseConfig configures Acquire.
type LeaseConfig struct {
	// Instance identifies this process in the lease (and in the refusal).
	Instance string
	// TTL: see DefaultLeaseTTL. If not set, DefaultLeaseTTL.
	TTL time.Duration
	// Replicas of the bucket when Acquire creates it. If not set, 1.
	Replicas int
	// Exclusive says that no other live instance can hold a lease in this
	// bucket: it lives on this process's own embedded server, whose store
	// this process holds locked. A lease found there is a dead
	// predecessor's and is taken over at once instead of waited out.
	Exclusive bool
	Logger    *slog.Logger
}

// Acquire takes a lease on every workspace, or none: if any is held by a
// live lease of another instance it releases what it took and returns an
// error matching ErrAlreadyRunning (and *HeldError when the holder is
// known) that names the holder. The lease renews itself until Release;
// Lost is closed if it could not.
func Acquire(ctx context.Context, js jetstream.JetStream, workspaces []string, cfg LeaseConfig) (*Lease, error) {
	l, err := kvlease.Acquire(ctx, js, workspaces, kvlease.Config{
		Bucket: events.BucketMCPLeases, Instance: cfg.Instance, TTL: cfg.TTL, Replicas: cfg.Replicas,
		Exclusive: cfg.Exclusive, Name: "mcp", Logger: cfg.Logger,
	})
	if errors.Is(err, kvlease.ErrHeld) {
		return nil, fmt.Errorf("%w: workspace %w", ErrAlreadyRunning, err)
	}
	return l, err
}
