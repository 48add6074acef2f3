package mcpchannel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/events"
)

// ErrAlreadyRunning is returned by Acquire when another instance holds a
// live lease on one of the workspaces.
var ErrAlreadyRunning = errors.New("mcpchannel: another molecule-relay mcp instance serves this workspace")

// HeldError is Acquire's refusal when another instance holds a live lease;
// it matches ErrAlreadyRunning.
type HeldError struct {
	Workspace, Holder string
	// Until is when the lease expires unless its holder renews it.
	Until time.Time
	ttl   time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: workspace %s is held by instance %s until %s (renewed while it runs; a crashed instance's lease expires after %s)",
		ErrAlreadyRunning, e.Workspace, e.Holder, e.Until.Format(time.RFC3339), e.ttl)
}

func (e *HeldError) Unwrap() error { return ErrAlreadyRunning }

// watchReleases signals on the returned channel when a lease of one of the
// workspaces is deleted (its holder stopped), so that a waiting instance
// tries again at once instead of polling; stop ends the watch.
func watchReleases(ctx context.Context, js jetstream.JetStream, workspaces []string) (released <-chan struct{}, stop func(), err error) {
	kv, err := js.KeyValue(ctx, events.BucketMCPLeases)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := kv.WatchFiltered(wctx, workspaces, jetstream.UpdatesOnly(), jetstream.MetaOnly())
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
const DefaultLeaseTTL = 2 * time.Second

// leaseValue is a lease key's value.
type leaseValue struct {
	Instance string    `json:"instance"`
	Expires  time.Time `json:"expires"`
}

// Lease is one instance's hold on its workspaces: a key per workspace in
// the events.BucketMCPLeases bucket, taken with create (or compare-and-set
// over an expired lease), renewed by compare-and-set every TTL/4 and
// deleted on Release.
type Lease struct {
	kv       jetstream.KeyValue
	instance string
	ttl      time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	revs     map[string]uint64 // workspace → revision of our value
	stop     chan struct{}
	done     chan struct{}
	lost     chan struct{}
	once     sync.Once
	stopOnce sync.Once
	// exclusive: see LeaseConfig.Exclusive.
	exclusive bool
}

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
// error matching ErrAlreadyRunning that names the holder. The lease renews
// itself until Release; Lost is closed if it could not.
func Acquire(ctx context.Context, js jetstream.JetStream, workspaces []string, cfg LeaseConfig) (*Lease, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := leaseBucket(ctx, js, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	l := &Lease{kv: kv, instance: cfg.Instance, ttl: cfg.TTL, log: cfg.Logger, revs: map[string]uint64{},
		stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{}), exclusive: cfg.Exclusive}
	for _, ws := range workspaces {
		if err := l.take(ctx, ws); err != nil {
			l.release()
			return nil, err
		}
	}
	go l.renew()
	return l, nil
}

// leaseBucket is created by the mcp command, not the topology: only it
// takes leases. Like every bucket the relay writes, a replicated one reads
// through the stream leader (events.BucketStreamConfig): a lease's create
// followed by a get must see the create.
func leaseBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := events.EnsureBucket(ctx, js, jetstream.KeyValueConfig{Bucket: events.BucketMCPLeases, History: 1, Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("mcpchannel: lease bucket: %w", err)
	}
	return kv, nil
}

func (l *Lease) value() []byte {
	b, _ := json.Marshal(leaseValue{Instance: l.instance, Expires: time.Now().Add(l.ttl).UTC()})
	return b
}

// take creates the workspace's key, or replaces an expired lease with
// compare-and-set; a live lease of another instance is a refusal.
func (l *Lease) take(ctx context.Context, ws string) error {
	rev, err := l.kv.Create(ctx, ws, l.value())
	if errors.Is(err, jetstream.ErrKeyExists) {
		var e jetstream.KeyValueEntry
		if e, err = l.kv.Get(ctx, ws); err == nil {
			var v leaseValue
			if json.Unmarshal(e.Value(), &v) == nil && v.Instance != l.instance && time.Now().Before(v.Expires) && !l.exclusive {
				return &HeldError{Workspace: ws, Holder: v.Instance, Until: v.Expires, ttl: l.ttl}
			}
			if l.exclusive && v.Instance != l.instance && time.Now().Before(v.Expires) {
				l.log.Info("mcp: taking over the lease of an instance that ended without releasing it", "workspace", ws, "holder", v.Instance)
			}
			rev, err = l.kv.Update(ctx, ws, l.value(), e.Revision())
		}
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			return fmt.Errorf("%w: workspace %s was taken by another instance just now", ErrAlreadyRunning, ws)
		}
	}
	if err != nil {
		return fmt.Errorf("mcpchannel: lease on workspace %s: %w", ws, err)
	}
	l.mu.Lock()
	l.revs[ws] = rev
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
	deadline := time.Now().Add(l.ttl)
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/4)
		err := l.renewAll(ctx)
		cancel()
		switch {
		case err == nil:
			deadline = time.Now().Add(l.ttl)
		case isWrongSequence(err) || time.Now().After(deadline):
			l.log.Error("mcp: lease lost; stopping", "error", err)
			l.once.Do(func() { close(l.lost) })
			return
		default:
			l.log.Warn("mcp: lease renewal failed; retrying", "error", err)
		}
	}
}

func (l *Lease) renewAll(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ws, rev := range l.revs {
		next, err := l.kv.Update(ctx, ws, l.value(), rev)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", ws, err)
		}
		l.revs[ws] = next
	}
	return nil
}

// Lost is closed when the lease could not be renewed; the instance must
// stop serving.
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
	for ws, rev := range l.revs {
		if err := l.kv.Delete(ctx, ws, jetstream.LastRevision(rev)); err != nil {
			l.log.Warn("mcp: lease not released; it expires by itself", "workspace", ws, "error", err)
		}
		delete(l.revs, ws)
	}
}
