package memory

import (
	"sync"

	"github.com/molecule-ai/molecule-relay/pkg/handler"
)

// maxLastWrites bounds the conversations whose last write a Store keeps
// (each at most Config.MaxBytes of turns).
const maxLastWrites = 256

// lastWrites remembers, per key, the turns this Store last wrote and the
// revision the write got. Record appends on them without reading the key
// first: the compare-and-set on that revision succeeds only if the key
// still holds exactly those turns, and any other write in between (another
// process, a seed, expiry, a purge) makes it fail, after which Record reads
// the key as it always did. So it saves a read without trusting a stale
// copy. Safe for concurrent use.
type lastWrites struct {
	mu sync.Mutex
	m  map[string]lastWrite
}

type lastWrite struct {
	turns []handler.Turn
	rev   uint64
}

// get returns key's last write, its turns clipped so that an append
// copies them rather than writing into the shared array.
func (l *lastWrites) get(key string) ([]handler.Turn, uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.m[key]
	return w.turns[:len(w.turns):len(w.turns)], w.rev, ok
}

// put records a write of turns that got rev, unless a newer one is known.
func (l *lastWrites) put(key string, turns []handler.Turn, rev uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.m[key]; ok && w.rev >= rev {
		return
	}
	if l.m == nil || len(l.m) >= maxLastWrites {
		l.m = make(map[string]lastWrite) // forget all: cheap, and only costs reads
	}
	l.m[key] = lastWrite{turns: turns, rev: rev}
}

// drop forgets key's last write (it proved stale).
func (l *lastWrites) drop(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, key)
}
