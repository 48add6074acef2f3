// Package kvlease is a lease on keys of a NATS key-value bucket: a key per
// held name, taken with create (or compare-and-set over an expired lease),
// renewed by compare-and-set every TTL/4 and deleted on Release. A holder
// that cannot renew before its lease expires is told so (Lost) and must
// stop what the lease protects. The mcp command holds its workspaces with
// it (one session per workspace); a poller group member holds its
// membership with it (internal/pollgroup).
package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrHeld is returned by Acquire when another instance holds a live lease
// on one of the keys.
var ErrHeld = errors.New("kvlease: held by another instance")

// HeldError is Acquire's refusal when another instance holds a live lease;
// it matches ErrHeld.
type HeldError struct {
	// Key is the refused key (a workspace id for the mcp command).
	Key, Holder string
	// Until is when the lease expires unless its holder renews it.
	Until time.Time
	ttl   time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: %s is held by instance %s until %s (renewed while it runs; a crashed instance's lease expires after %s)",
		ErrHeld, e.Key, e.Holder, e.Until.Format(time.RFC3339), e.ttl)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// DefaultTTL is how long a lease outlives its last renewal: a crashed
// instance blocks its keys at most this long (unless Config.Exclusive).
// It is renewed every quarter of it, so a successor of a SIGKILLed holder
// takes over within about 2 s.
const DefaultTTL = 2 * time.Second

// value is a lease key's value.
type value struct {
	Instance string    `json:"instance"`
	Expires  time.Time `json:"expires"`
	// Probe: see Config.Probe.
	Probe string `json:"probe,omitempty"`
}

// parse reads a lease key's value; what it cannot read stays empty.
func parse(v []byte) (l value) {
	_ = json.Unmarshal(v, &l)
	return l
}

// Probe returns the probe subject a lease key's value names, or "".
func Probe(v []byte) string { return parse(v).Probe }

// Holder returns the instance a lease key's value names, or "".
func Holder(v []byte) string { return parse(v).Instance }

// Lease is one instance's hold on its keys.
type Lease struct {
	kv       jetstream.KeyValue
	instance string
	ttl      time.Duration
	patience time.Duration // Config.Patience
	log      *slog.Logger
	name     string // for the logs

	mu       sync.Mutex
	revs     map[string]uint64 // key → revision of our value
	stop     chan struct{}
	done     chan struct{}
	lost     chan struct{}
	once     sync.Once
	stopOnce sync.Once
	// exclusive: see Config.Exclusive.
	exclusive bool
	probe     string // Config.Probe
}

// Config configures Acquire.
type Config struct {
	// Bucket holds the lease keys; Acquire creates it when missing.
	Bucket string
	// Instance identifies this process in the lease (and in the refusal).
	Instance string
	// TTL: see DefaultTTL. If not set, DefaultTTL.
	TTL time.Duration
	// Patience is how long renewals may fail before Lost is closed; if not
	// set, TTL. A holder whose exclusive work is guarded by something
	// else (a poller group's claims) sets it longer, so a server that
	// stalls for a few seconds does not make it drop and redo everything.
	Patience time.Duration
	// Replicas of the bucket when Acquire creates it. If not set, 1.
	Replicas int
	// Exclusive says that no other live instance can hold a lease in this
	// bucket: it lives on this process's own embedded server, whose store
	// this process holds locked. A lease found there is a dead
	// predecessor's and is taken over at once instead of waited out.
	Exclusive bool
	// Probe, when set, is a core NATS subject on which the holder answers
	// requests while it lives; it is written into the lease's value so
	// that others may ask (a poller group's liveness probes). Old holders
	// leave it out.
	Probe string
	// Name says what the lease protects, in its log lines ("mcp").
	Name   string
	Logger *slog.Logger
}

// Acquire takes a lease on every key, or none: if any is held by a live
// lease of another instance it releases what it took and returns an error
// matching ErrHeld that names the holder. The lease renews itself until
// Release; Lost is closed if it could not.
func Acquire(ctx context.Context, js jetstream.JetStream, keys []string, cfg Config) (*Lease, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Patience <= 0 {
		cfg.Patience = cfg.TTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := Bucket(ctx, js, cfg.Bucket, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	l := &Lease{kv: kv, instance: cfg.Instance, ttl: cfg.TTL, patience: cfg.Patience, log: cfg.Logger, name: cfg.Name, revs: map[string]uint64{},
		stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{}), exclusive: cfg.Exclusive, probe: cfg.Probe}
	for _, k := range keys {
		if err := l.take(ctx, k); err != nil {
			l.release()
			return nil, err
		}
	}
	go l.renew()
	return l, nil
}

// Bucket creates (or binds) a lease bucket. Lease buckets are created by
// their users, not the topology: only they take leases. Like every bucket
// the relay writes, a replicated one reads through the stream leader
// (events.BucketStreamConfig): a lease's create followed by a get must see
// the create.
func Bucket(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	kv, err := events.EnsureBucket(ctx, js, jetstream.KeyValueConfig{Bucket: bucket, History: 1, Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("kvlease: lease bucket: %w", err)
	}
	return kv, nil
}

func (l *Lease) value() []byte {
	b, _ := json.Marshal(value{Instance: l.instance, Expires: time.Now().Add(l.ttl).UTC(), Probe: l.probe})
	return b
}

// take creates the key, or replaces an expired lease with compare-and-set;
// a live lease of another instance is a refusal.
func (l *Lease) take(ctx context.Context, key string) error {
	rev, err := l.kv.Create(ctx, key, l.value())
	if errors.Is(err, jetstream.ErrKeyExists) {
		var e jetstream.KeyValueEntry
		if e, err = l.kv.Get(ctx, key); err == nil {
			var v value
			if json.Unmarshal(e.Value(), &v) == nil && v.Instance != l.instance && time.Now().Before(v.Expires) && !l.exclusive {
				return &HeldError{Key: key, Holder: v.Instance, Until: v.Expires, ttl: l.ttl}
			}
			if l.exclusive && v.Instance != l.instance && time.Now().Before(v.Expires) {
				l.log.Info(l.name+": taking over the lease of an instance that ended without releasing it", "key", key, "holder", v.Instance)
			}
			rev, err = l.kv.Update(ctx, key, l.value(), e.Revision())
		}
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			return fmt.Errorf("%w: %s was taken by another instance just now", ErrHeld, key)
		}
	}
	if err != nil {
		return fmt.Errorf("kvlease: lease on %s: %w", key, err)
	}
	l.mu.Lock()
	l.revs[key] = rev
	l.mu.Unlock()
	return nil
}

// isWrongSequence: a compare-and-set lost to another writer.
func isWrongSequence(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }

// renew extends every key with compare-and-set every TTL/4. A key another
// instance took over (our lease had expired) or that stays unrenewable
// past its expiry closes Lost.
func (l *Lease) renew() {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 4)
	defer t.Stop()
	deadline := time.Now().Add(l.patience)
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		// The deadline counts from before the renewal was sent: the
		// others count from when they saw it, which is later. A renewal
		// may take until then: a loaded server that answers in a second
		// still renews a 2 s lease, where a TTL/4 timeout lost it.
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := l.renewAll(ctx)
		cancel()
		switch {
		case err == nil:
			deadline = sent.Add(l.patience)
		case isWrongSequence(err) || time.Now().After(deadline):
			l.log.Error(l.name+": lease lost; stopping", "error", err)
			l.once.Do(func() { close(l.lost) })
			return
		default:
			l.log.Warn(l.name+": lease renewal failed; retrying", "error", err)
		}
	}
}

func (l *Lease) renewAll(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, rev := range l.revs {
		next, err := l.kv.Update(ctx, k, l.value(), rev)
		if isWrongSequence(err) {
			next, err = l.renewedUnseen(ctx, k, rev, err)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		l.revs[k] = next
	}
	return nil
}

// renewedUnseen: a renewal whose reply timed out (a loaded server) may
// have been applied, and the next one then fails on its revision. A key
// that still names this instance, at a newer revision, holds our own
// renewal (no other instance writes our name): renew from it. Anything
// else is a takeover and stays mismatch.
func (l *Lease) renewedUnseen(ctx context.Context, k string, rev uint64, mismatch error) (uint64, error) {
	e, err := l.kv.Get(ctx, k)
	if err != nil || e.Revision() <= rev || Holder(e.Value()) != l.instance {
		return 0, mismatch
	}
	return l.kv.Update(ctx, k, l.value(), e.Revision())
}

// Lost is closed when the lease could not be renewed; the instance must
// stop what it protects.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Release stops the renewal and deletes the keys this lease still holds.
// Safe to call more than once.
func (l *Lease) Release() {
	l.Abandon()
	l.release()
}

// Abandon stops the renewal without deleting anything, as a crash would
// (for tests of the expiry).
func (l *Lease) Abandon() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

func (l *Lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, rev := range l.revs {
		if err := l.kv.Delete(ctx, k, jetstream.LastRevision(rev)); err != nil {
			l.log.Warn(l.name+": lease not released; it expires by itself", "key", k, "error", err)
		}
		delete(l.revs, k)
	}
}
