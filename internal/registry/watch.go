package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Start watches the bucket until ctx ends. It returns once every entry
// present at the start was read (each passed to onChange, when not nil),
// then follows the changes in a goroutine, in the order NATS gives them:
// a change made by `workspaces add` reaches onChange within milliseconds.
// An entry that does not open with the key is logged by the caller
// through onError and skipped.
func (r *Registry) Start(ctx context.Context, onChange func(Change), onError func(error)) error {
	w, err := r.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("registry: watch %s: %w", Bucket, err)
	}
	apply := func(e jetstream.KeyValueEntry) {
		c, err := r.applyEntry(e)
		if err != nil {
			if onError != nil {
				onError(err)
			}
			return
		}
		r.signal()
		if onChange != nil {
			onChange(c)
		}
	}
	for e := range w.Updates() {
		if e == nil {
			break // every entry present at the start was delivered
		}
		apply(e)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.mu.Lock()
	r.watching = true
	r.mu.Unlock()
	go func() {
		defer func() {
			_ = w.Stop()
			r.mu.Lock()
			r.watching = false // nothing to settle on (settle)
			r.mu.Unlock()
		}()
		var retry <-chan time.Time
		if r.loadKey != nil {
			t := time.NewTicker(r.keyRetry)
			defer t.Stop()
			retry = t.C
		}
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					apply(e)
				}
			case <-retry:
				r.retryWithNewKey(ctx, onChange, onError)
			}
		}
	}()
	return nil
}

// FollowKey makes a running registry follow a key rotation without a
// restart: an entry that does not open with the key is kept aside, and
// every keyRetry while any is, load reads the key source again; once one
// of them opens with what it gives, that key is the registry's. Call it
// before Start.
func (r *Registry) FollowKey(load func(context.Context) (*Key, error)) {
	r.loadKey, r.keyRetry = load, DefaultKeyRetry
}

// DefaultKeyRetry is how often a registry with entries it could not open
// reads its key source again (FollowKey): the seconds after an operator
// points the relays at a rotated key.
const DefaultKeyRetry = 10 * time.Second

func (r *Registry) retryWithNewKey(ctx context.Context, onChange func(Change), onError func(error)) {
	r.mu.Lock()
	waiting := len(r.unopened)
	r.mu.Unlock()
	if waiting == 0 {
		return
	}
	next, err := r.loadKey(ctx)
	if err != nil {
		if onError != nil {
			onError(fmt.Errorf("registry: %d entries do not open with the key, and reading it again failed: %w", waiting, err))
		}
		return
	}
	for _, c := range r.openWith(next) {
		r.signal()
		if onChange != nil {
			onChange(c)
		}
	}
}

// openWith applies the entries set aside that open with next; when any
// does, next becomes the registry's key.
func (r *Registry) openWith(next *Key) []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Change
	for id, v := range r.unopened {
		ent, err := decode(next, id, v)
		if err != nil {
			continue
		}
		r.key = next
		r.cur[id], r.last[id] = ent, ent
		delete(r.unopened, id)
		out = append(out, Change{Entry: ent})
	}
	return out
}

func (r *Registry) applyEntry(e jetstream.KeyValueEntry) (Change, error) {
	id := e.Key()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = max(r.seen, e.Revision())
	delete(r.unopened, id) // superseded
	if e.Operation() != jetstream.KeyValuePut {
		old := r.cur[id]
		delete(r.cur, id)
		old.ID = id
		return Change{Entry: old, Removed: true}, nil
	}
	ent, err := decode(r.key, id, e.Value())
	if errors.Is(err, ErrKey) && r.loadKey != nil {
		r.unopened[id] = e.Value() // sealed with a key this relay has not read yet
	}
	if err != nil {
		return Change{}, err
	}
	r.cur[id], r.last[id] = ent, ent
	return Change{Entry: ent}, nil
}

func (r *Registry) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Lookup returns the entry of a workspace as the watch last saw it, also
// after it was removed: a reply already in flight for it is still posted
// with its token.
func (r *Registry) Lookup(id string) (Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.last[id]
	return e, ok
}

// Tokens returns the tokens of every workspace the watch saw, removed ones
// included (an upload that holds one is refused).
func (r *Registry) Tokens() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.last))
	for _, e := range r.last {
		out = append(out, e.Token)
	}
	return out
}

// Active says whether workspace id is to be polled now (present and not
// paused).
func (r *Registry) Active(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.cur[id]
	return ok && !e.Paused
}

// Current returns the ids of the workspaces to poll now (present and not
// paused), sorted; it follows the watch started by Start.
func (r *Registry) Current() []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.cur))
	for id, e := range r.cur {
		if !e.Paused {
			out = append(out, id)
		}
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Changed receives after the set changed (coalesced: one receive may
// stand for several changes; read Current then).
func (r *Registry) Changed() <-chan struct{} { return r.changed }
