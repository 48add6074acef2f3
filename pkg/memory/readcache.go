package memory

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/handler"
)

// A full read of a conversation costs the server one scan of the stream
// from the conversation's oldest kept message: its file store finds a
// subject's next message by walking the messages in between
// (msgBlock.firstMatching), so with 100 conversations interleaved a read
// of 20 messages walks about 2,000. A Store therefore keeps what it read
// of each conversation and asks only for the messages after the last one
// it holds: usually none (answered at once from the subject index) or
// the few written since, a walk of what the stream received meanwhile.
//
// What the cache holds is what the stream holds, except for deletions,
// which a read from the last sequence on cannot see:
//   - the per-conversation bound drops the oldest messages: the cache
//     keeps the same number (the stream's MaxMsgsPerSubject);
//   - `history forget` purges the subject and then writes a forget
//     marker, which the next read sees and drops everything before;
//   - MaxAge expiry and a purge by other means: an entry is read in full
//     again once it is cacheFor old, so a running stage shows such a
//     turn at most that long after it went.

// cacheFor is how long a conversation is read from the last message on
// before it is read in full again.
const cacheFor = 10 * time.Second

// Bounds of a Store's cache: beyond them it forgets everything (cheap,
// and only costs full reads).
const (
	maxCachedConversations = 4096
	maxCachedBytes         = 16 << 20
)

// forgetMarker is the message `history forget` writes after purging a
// conversation's subject. It is not a list, so earlier versions of the
// reader skip it.
var forgetMarker = []byte(`{"forgotten":true}`)

func isForgetMarker(data []byte) bool { return bytes.Equal(data, forgetMarker) }

type readCache struct {
	mu    sync.Mutex
	m     map[string]*cachedConv
	bytes int
}

// cachedConv is the kept messages of one conversation, as last read.
type cachedConv struct {
	recs  []record // oldest first, at most the stream's bound
	last  uint64   // sequence of the newest
	read  time.Time
	bytes int
}

// records returns the records of subject the stream keeps: the cached
// ones and those after them, or all of them read again when there is no
// fresh entry. The slice is shared with the cache: read only.
func (s *Store) records(ctx context.Context, subject string) ([]record, error) {
	c := &s.cache
	c.mu.Lock()
	e := c.m[subject]
	c.mu.Unlock()
	if e == nil || time.Since(e.read) > cacheFor {
		recs, last, err := s.get.records(ctx, subject, 0)
		if err != nil {
			return nil, err
		}
		recs = s.keep(afterForget(recs))
		if last != 0 {
			c.put(subject, e, &cachedConv{recs: recs, last: last, read: time.Now(), bytes: sizeOf(recs)})
		}
		return recs, nil
	}
	fresh, last, err := s.get.records(ctx, subject, e.last+1)
	if err != nil {
		return nil, err
	}
	if len(fresh) == 0 {
		return e.recs, nil
	}
	var recs []record
	if i := lastForget(fresh); i >= 0 {
		recs = fresh[i+1:]
	} else {
		recs = append(e.recs[:len(e.recs):len(e.recs)], fresh...)
	}
	recs = s.keep(recs)
	c.put(subject, e, &cachedConv{recs: recs, last: last, read: e.read, bytes: sizeOf(recs)})
	return recs, nil
}

// keep is the newest recs the stream keeps of a subject.
func (s *Store) keep(recs []record) []record {
	if n := s.get.batch - 1; len(recs) > n {
		return recs[len(recs)-n:]
	}
	return recs
}

func lastForget(recs []record) int {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].forget {
			return i
		}
	}
	return -1
}

// put replaces old (the entry the read started from, nil for none) with
// e, unless another read replaced it meanwhile with a newer one.
func (c *readCache) put(subject string, old, e *cachedConv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.m[subject]
	if cur != old && cur != nil && cur.last >= e.last {
		return
	}
	if c.m == nil || len(c.m) >= maxCachedConversations || c.bytes+e.bytes > maxCachedBytes {
		c.m, c.bytes = make(map[string]*cachedConv), 0
	} else if cur != nil {
		c.bytes -= cur.bytes
	}
	c.m[subject] = e
	c.bytes += e.bytes
}

func sizeOf(recs []record) int {
	n := 0
	for _, r := range recs {
		for _, sz := range r.sizes {
			n += sz
		}
	}
	return n
}

// turnsOf is the turns of recs, oldest first, each once (the first of any
// with the same non-empty ActivityID and Role), the newest turns of them
// within turns and maxBytes of JSON (the newest always): a new slice, the
// caller may keep it.
func turnsOf(recs []record, turns, maxBytes int) []handler.Turn {
	n := 0
	for _, r := range recs {
		n += len(r.turns)
	}
	all := make([]handler.Turn, 0, n)
	sizes := make([]int, 0, n)
	for _, r := range recs {
		for i, t := range r.turns {
			if t.ActivityID != "" && holds(all, t) {
				continue
			}
			all = append(all, t)
			sizes = append(sizes, r.sizes[i])
		}
	}
	first := max(len(all)-turns, 0)
	size := 1 // the list's brackets, less the comma the first turn does not need
	from := len(all)
	for from > first {
		n := sizes[from-1] + 1 // its comma
		if size+n > maxBytes && from < len(all) {
			break
		}
		size += n
		from--
	}
	return all[from:]
}

// holds reports whether turns has one with t's ActivityID and Role. A
// conversation holds tens of turns: a walk beats a map.
func holds(turns []handler.Turn, t handler.Turn) bool {
	for i := range turns {
		if turns[i].ActivityID == t.ActivityID && turns[i].Role == t.Role {
			return true
		}
	}
	return false
}
