// Package registry holds the workspace set in a NATS key-value bucket
// (Bucket, one key per workspace id) when MOLECULE_WORKSPACE_REGISTRY is
// on: the workspaces commands change it, and every running relay watches
// it, starting an added workspace and stopping a removed or paused one
// without a restart. Tokens are stored sealed with AES-256-GCM (key.go):
// the bucket, the NATS store and its backups hold no token in the clear.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Bucket is the registry's key-value bucket.
const Bucket = "molecule_workspaces"

// ErrNotFound: no such workspace in the registry.
var ErrNotFound = errors.New("registry: workspace not in the registry")

// ErrInvalid is matched by bad entries (id, URL, token).
var ErrInvalid = errors.New("registry: invalid entry")

var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// Entry is one workspace. Token is in the clear in memory only.
type Entry struct {
	ID          string    `json:"id"`
	PlatformURL string    `json:"platform_url"`
	OrgID       string    `json:"org_id,omitempty"`
	Token       string    `json:"-"`
	Paused      bool      `json:"paused"`
	Added       time.Time `json:"added"`
}

// String hides the token.
func (e Entry) String() string { return e.ID }

// record is an entry as stored: the token sealed, bound to the id.
type record struct {
	PlatformURL string    `json:"platform_url"`
	OrgID       string    `json:"org_id,omitempty"`
	Sealed      []byte    `json:"token_sealed"`
	Paused      bool      `json:"paused,omitempty"`
	Added       time.Time `json:"added"`
}

// Change is one change the watch saw: an entry put, or removed.
type Change struct {
	Entry   Entry
	Removed bool
}

// Registry reads and changes the workspace set. Safe for concurrent use.
type Registry struct {
	kv  jetstream.KeyValue
	key *Key

	mu  sync.RWMutex
	cur map[string]Entry
	// last keeps a removed workspace's entry, so a reply still in flight
	// for it is posted with its token (Lookup).
	last    map[string]Entry
	changed chan struct{}

	// FollowKey's: the key source, and the entries that did not open
	// with the key (id → stored value), tried again with a new one.
	loadKey  func(context.Context) (*Key, error)
	keyRetry time.Duration
	unopened map[string][]byte

	// watching: Start runs; seen is the newest revision it applied.
	watching bool
	seen     uint64
}

// settle waits, while Start runs, until the watch shows a change this
// process just made (shown, called under mu): a view read right after it
// (Entries, Current) includes it. The watch shows a change within
// milliseconds; after settleMax the change is left to it.
func (r *Registry) settle(ctx context.Context, shown func() bool) {
	for deadline := time.Now().Add(settleMax); ctx.Err() == nil && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		r.mu.RLock()
		done := !r.watching || shown()
		r.mu.RUnlock()
		if done {
			return
		}
	}
}

const settleMax = 2 * time.Second

// Entries returns every entry as the watch last saw it, paused ones
// included, by id: what List reads from the bucket, without a request per
// entry. Start must have run.
func (r *Registry) Entries() []Entry {
	r.mu.RLock()
	out := make([]Entry, 0, len(r.cur))
	for _, e := range r.cur {
		out = append(out, e)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Open opens the registry bucket; with create (the admin commands and a
// relay that ensures its topology) it is created when missing.
func Open(ctx context.Context, js jetstream.JetStream, key *Key, create bool, replicas int) (*Registry, error) {
	if key == nil {
		return nil, fmt.Errorf("%w: not set; set MOLECULE_REGISTRY_KEY_FILE or MOLECULE_REGISTRY_KEY", ErrKey)
	}
	var kv jetstream.KeyValue
	var err error
	if create {
		kv, err = events.EnsureBucket(ctx, js, jetstream.KeyValueConfig{Bucket: Bucket, History: 1, Replicas: max(replicas, 1),
			Description: "molecule-relay workspace registry (tokens sealed with AES-256-GCM)"})
	} else {
		kv, err = js.KeyValue(ctx, Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w (an admin creates it with: molecule-relay workspaces list)", Bucket, err)
	}
	return &Registry{kv: kv, key: key, cur: map[string]Entry{}, last: map[string]Entry{}, unopened: map[string][]byte{}, changed: make(chan struct{}, 1)}, nil
}

func (e *Entry) validate() error {
	switch {
	case !validID.MatchString(e.ID):
		return fmt.Errorf("%w: workspace id %q: use the workspace's UUID", ErrInvalid, e.ID)
	case e.PlatformURL == "":
		return fmt.Errorf("%w: workspace %s: no platform URL (--platform-url or MOLECULE_PLATFORM_URL)", ErrInvalid, e.ID)
	case e.Token == "":
		return fmt.Errorf("%w: workspace %s: no token (--token-file)", ErrInvalid, e.ID)
	}
	return nil
}

// Put adds e, or replaces the entry of its id (keeping its added time).
func (r *Registry) Put(ctx context.Context, e Entry) error {
	if err := e.validate(); err != nil {
		return err
	}
	if old, err := r.Get(ctx, e.ID); err == nil && !old.Added.IsZero() {
		e.Added = old.Added
	}
	if e.Added.IsZero() {
		e.Added = time.Now().UTC()
	}
	return r.write(ctx, e)
}

func (r *Registry) write(ctx context.Context, e Entry) error {
	b, _ := json.Marshal(record{PlatformURL: e.PlatformURL, OrgID: e.OrgID, Sealed: r.keyNow().seal(e.ID, e.Token), Paused: e.Paused, Added: e.Added})
	rev, err := r.kv.Put(ctx, e.ID, b)
	if err != nil {
		return fmt.Errorf("registry: write workspace %s: %w", e.ID, err)
	}
	r.settle(ctx, func() bool { return r.seen >= rev })
	return nil
}

// Get reads one entry from the bucket and opens its token.
func (r *Registry) Get(ctx context.Context, id string) (Entry, error) {
	kve, err := r.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("registry: read workspace %s: %w", id, err)
	}
	return decode(r.keyNow(), id, kve.Value())
}

// keyNow is the key entries are sealed and opened with (FollowKey may
// change it).
func (r *Registry) keyNow() *Key {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.key
}

func decode(k *Key, id string, v []byte) (Entry, error) {
	var rec record
	if err := json.Unmarshal(v, &rec); err != nil {
		return Entry{}, fmt.Errorf("registry: entry %s is not a registry record: %w", id, err)
	}
	tok, err := k.open(id, rec.Sealed)
	if err != nil {
		return Entry{}, err
	}
	return Entry{ID: id, PlatformURL: rec.PlatformURL, OrgID: rec.OrgID, Token: tok, Paused: rec.Paused, Added: rec.Added}, nil
}

// Remove deletes a workspace; ErrNotFound when it is not there.
func (r *Registry) Remove(ctx context.Context, id string) error {
	if _, err := r.kv.Get(ctx, id); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err := r.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("registry: remove workspace %s: %w", id, err)
	}
	r.settle(ctx, func() bool { _, ok := r.cur[id]; return !ok })
	return nil
}

// SetPaused pauses (true) or resumes a workspace.
func (r *Registry) SetPaused(ctx context.Context, id string, paused bool) error {
	e, err := r.Get(ctx, id)
	if err != nil {
		return err
	}
	e.Paused = paused
	return r.write(ctx, e)
}

// List reads every entry, by id.
func (r *Registry) List(ctx context.Context) ([]Entry, error) {
	keys, err := r.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: list: %w", err)
	}
	var out []Entry
	for id := range keys.Keys() {
		e, err := r.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Rotate re-encrypts every entry with next, reading it with the
// registry's key, and returns how many it rewrote; the registry then uses
// next. An entry that already opens with next (a rotation cut short and
// run again) is left as it is; one that opens with neither fails it.
func (r *Registry) Rotate(ctx context.Context, next *Key) (int, error) {
	keys, err := r.kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("registry: list: %w", err)
	}
	n := 0
	for id := range keys.Keys() {
		kve, err := r.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("registry: read workspace %s: %w", id, err)
		}
		e, err := decode(r.keyNow(), id, kve.Value())
		if err != nil {
			if _, again := decode(next, id, kve.Value()); again == nil {
				continue // rotated by an earlier run
			}
			return n, err
		}
		b, _ := json.Marshal(record{PlatformURL: e.PlatformURL, OrgID: e.OrgID, Sealed: next.seal(e.ID, e.Token), Paused: e.Paused, Added: e.Added})
		// Compare-and-set: a change made meanwhile with the old key is
		// not overwritten; run the rotation again.
		if _, err := r.kv.Update(ctx, id, b, kve.Revision()); err != nil {
			return n, fmt.Errorf("registry: rewrite workspace %s: %w (run rotate-key again)", id, err)
		}
		n++
	}
	r.mu.Lock()
	r.key = next
	r.mu.Unlock()
	return n, nil
}

// Seed adds the entries not in the registry yet and leaves the others as
// they are (a workspace paused or re-keyed by the commands stays so). It
// returns how many it added. The static settings seed the registry at
// every start: a workspace removed from the registry comes back unless it
// is removed from them too.
func (r *Registry) Seed(ctx context.Context, entries []Entry) (int, error) {
	n, key := 0, r.keyNow()
	var last uint64
	defer func() { r.settle(ctx, func() bool { return r.seen >= last }) }()
	for _, e := range entries {
		if err := e.validate(); err != nil {
			return n, err
		}
		if e.Added.IsZero() {
			e.Added = time.Now().UTC()
		}
		b, _ := json.Marshal(record{PlatformURL: e.PlatformURL, OrgID: e.OrgID, Sealed: key.seal(e.ID, e.Token), Added: e.Added})
		rev, err := r.kv.Create(ctx, e.ID, b)
		switch {
		case errors.Is(err, jetstream.ErrKeyExists):
		case err != nil:
			return n, fmt.Errorf("registry: seed workspace %s: %w", e.ID, err)
		default:
			n, last = n+1, rev
		}
	}
	return n, nil
}
