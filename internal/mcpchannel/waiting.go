package mcpchannel

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A session that waits for another's channel says so in the lease bucket,
// next to the lease it waits for (kvlease.MarkWaiting: a key
// <workspace>.waiting.<instance>, renewed, with an expiry), so that the
// console (issue 40: "which holds the channel, which waits") lists it.
// The lease's own keys are bare workspace ids: neither the lease nor its
// release watch (watchReleases) sees these.

// markWaiting lists instance as waiting for each workspace's channel until
// stop, in the lease bucket of js.
func markWaiting(ctx context.Context, js jetstream.JetStream, workspaces []string, instance string, replicas int) (stop func(), err error) {
	kv, err := kvlease.Bucket(ctx, js, events.BucketMCPLeases, max(replicas, 1))
	if err != nil {
		return nil, err
	}
	return kvlease.MarkWaiting(ctx, kv, workspaces, instance)
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
