package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// A full read of a conversation costs the server one scan of the stream
// from the conversation's oldest kept message: its file store finds a
// subject's next message by walking the messages in between
// (msgBlock.firstMatching), so a read of 20 messages walks about 20 times
// the number of conversations written meanwhile (2,000 at 100, 80,000 at
// 4,000: 0.75 and 4.4 ms of CPU, BenchmarkLoadOfAConversationIdleForSeconds).
// A Store therefore keeps what it read of each conversation and asks only
// for the messages after the last one it holds: usually none (answered
// at once from the subject index) or the few written since.
//
// What the cache holds is what the stream holds (every message: forget
// markers, and messages that are neither, as records without turns),
// except for deletions, which a read from the last sequence on cannot
// see:
//   - the per-conversation bound drops the oldest messages: the cache
//     keeps the same number (the stream's MaxMsgsPerSubject);
//   - `history forget` purges the subject and then writes a forget
//     marker, which the next read sees and drops everything before;
//   - MaxAge expiry and a purge by other means drop the oldest messages
//     too: once an entry is cacheFor old, its next read also asks for
//     the conversation's oldest message (one message, found from the
//     subject index: oldest) and drops what it holds before that one; one
//     it does not hold at all means the entry is read in full again. So a
//     running stage shows such a turn at most cacheFor after it went;
//   - a message deleted by hand from the middle of a conversation: an
//     entry is read in full again once rereadEvery old.

// cacheFor is how long a conversation is read from the last message on
// alone; a read after it also asks for the oldest message.
const cacheFor = 10 * time.Second

// rereadEvery is how long an entry lives before it is read in full again.
const rereadEvery = 10 * time.Minute

// Bounds of a Store's cache: beyond them it forgets the half of its
// conversations read longest ago (their next reads are full reads).
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
	// staleAfter is cacheFor; tests shorten it (SetReadCacheFor).
	staleAfter time.Duration
	mu         sync.Mutex
	m          map[string]*convState
	bytes      int
	loads      uint64 // Loads so far: the clock of convState.used
}

// convState is one conversation in a Store's cache: what it last read,
// and the reads under way. Reads of one conversation run one at a time:
// a Load that finds one under way joins the next one, which starts once
// that one ends, so it still sees every write that ended before it began,
// and a burst of Loads of one conversation (64 dispatcher workers) costs
// a read or two in flight, each asking for what is new since the last.
type convState struct {
	entry    *cachedConv // nil until read, or after a read failed
	inflight *flight
	next     *flight // joined by the Loads that found inflight under way
	used     uint64  // readCache.loads at its last Load
}

// flight is one read of a conversation and the Loads waiting for it. Its
// turns are worked out once, when the read ends, for every Load of it
// (a burst of 64 Loads shares a read or two).
type flight struct {
	done  chan struct{}
	turns []handler.Turn // turnsOf what the read found; read only
	err   error
}

// cachedConv is the kept messages of one conversation, as last read.
type cachedConv struct {
	recs  []record  // oldest first, at most the stream's bound
	last  uint64    // sequence of the newest
	read  time.Time // when the oldest message was last asked for
	full  time.Time // when it was last read in full
	bytes int
}

// turns returns the turns of subject the stream keeps, bounded as Load
// returns them: of the cached records and those after them, or of all of
// them read again when there is no fresh entry. The slice is shared with
// the other Loads of the read: read only.
func (s *Store) turns(ctx context.Context, subject string) ([]handler.Turn, error) {
	c := &s.cache
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]*convState)
	}
	if len(c.m) >= maxCachedConversations || c.bytes > maxCachedBytes {
		c.evictOlderHalf()
	}
	st := c.m[subject]
	if st == nil {
		st = &convState{}
		c.m[subject] = st
	}
	c.loads++
	st.used = c.loads
	if st.inflight == nil {
		f := &flight{done: make(chan struct{})}
		st.inflight = f
		c.mu.Unlock()
		s.fly(ctx, subject, st, f)
		return f.turns, f.err
	}
	f, prev, lead := st.next, st.inflight, false
	if f == nil {
		f, lead = &flight{done: make(chan struct{})}, true
		st.next = f
	}
	c.mu.Unlock()
	if lead {
		// prev ends (its read has a deadline) and hands inflight to f.
		<-prev.done
		s.fly(ctx, subject, st, f)
		return f.turns, f.err
	}
	select {
	case <-f.done:
		return f.turns, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("memory: read %s: %w", subject, ctx.Err())
	}
}

// fly runs f, the read of subject under way, keeps what it read in st,
// hands inflight to the next read (if any Load waits for one) and
// releases f's Loads.
func (s *Store) fly(ctx context.Context, subject string, st *convState, f *flight) {
	c := &s.cache
	c.mu.Lock()
	e := st.entry
	c.mu.Unlock()
	recs, next, err := s.read(ctx, subject, e)
	if f.err = err; err == nil {
		f.turns = turnsOf(recs, s.cfg.Turns, s.cfg.MaxBytes)
	}
	c.mu.Lock()
	if c.m[subject] == st { // else the cache was emptied meanwhile: st counts no more
		if e != nil {
			c.bytes -= e.bytes
		}
		if next != nil {
			c.bytes += next.bytes
		}
	}
	st.entry = next // nil after a failure: read in full next time
	st.inflight, st.next = st.next, nil
	c.mu.Unlock()
	close(f.done)
}

// read reads subject in full, or from e (an entry not rereadEvery old)
// on, and returns the records the stream keeps and the entry to keep (nil
// for none). Once e is cacheFor old, the read also asks for the oldest
// message and drops what the stream no longer holds.
func (s *Store) read(ctx context.Context, subject string, e *cachedConv) ([]record, *cachedConv, error) {
	if e == nil || time.Since(e.full) > rereadEvery {
		return s.readFull(ctx, subject)
	}
	fresh, last, err := s.get.records(ctx, subject, e.last+1)
	if err != nil {
		return nil, nil, err
	}
	stale := time.Since(e.read) > s.cache.staleAfter
	if len(fresh) == 0 && !stale {
		return e.recs, e, nil
	}
	next := &cachedConv{recs: e.recs, last: e.last, read: e.read, full: e.full}
	if len(fresh) > 0 {
		next.last = last
		if i := lastForget(fresh); i >= 0 {
			next.recs = fresh[i:]
		} else {
			next.recs = append(e.recs[:len(e.recs):len(e.recs)], fresh...)
		}
		next.recs = s.keep(next.recs)
	}
	if stale {
		sum, found, err := s.get.oldest(ctx, subject)
		if err != nil {
			return nil, nil, err
		}
		from := 0
		if found {
			if from = indexOfSum(next.recs, sum); from < 0 {
				return s.readFull(ctx, subject) // the stream holds one this entry never read
			}
		} else {
			from = len(next.recs)
		}
		next.recs, next.read = next.recs[from:], time.Now()
	}
	next.bytes = sizeOf(next.recs)
	return next.recs, next, nil
}

// readFull reads every message of subject the stream keeps.
func (s *Store) readFull(ctx context.Context, subject string) ([]record, *cachedConv, error) {
	recs, last, err := s.get.records(ctx, subject, 0)
	if err != nil {
		return nil, nil, err
	}
	recs = s.keep(fromForget(recs))
	if last == 0 {
		return recs, nil, nil
	}
	now := time.Now()
	return recs, &cachedConv{recs: recs, last: last, read: now, full: now, bytes: sizeOf(recs)}, nil
}

// evictOlderHalf forgets the conversations whose last Load is older than
// the median's (about half of them). Reads under way finish on their own
// state.
func (c *readCache) evictOlderHalf() {
	if len(c.m) == 0 {
		c.bytes = 0
		return
	}
	used := make([]uint64, 0, len(c.m))
	for _, st := range c.m {
		used = append(used, st.used)
	}
	slices.Sort(used)
	median := used[len(used)/2]
	for subject, st := range c.m {
		if st.used <= median {
			if st.entry != nil {
				c.bytes -= st.entry.bytes
			}
			delete(c.m, subject)
		}
	}
}

// indexOfSum is the index of the first record with sum, or -1.
func indexOfSum(recs []record, sum uint64) int {
	for i := range recs {
		if recs[i].sum == sum {
			return i
		}
	}
	return -1
}

// fromForget is recs from the last forget marker on (with it: the stream
// holds it), or all of them.
func fromForget(recs []record) []record {
	if i := lastForget(recs); i >= 0 {
		return recs[i:]
	}
	return recs
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
