// The rows published recently, so a re-read does not publish them again.

package poller

import (
	"sort"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// SkipPublished is a row this relay already published, met again by an
// overlap or window re-read (recognised from the cursor record's recent
// set, without a publish).
const SkipPublished = "already_published"

// Why the cursor keeps the recently published activity ids: the inbound
// stream's de-duplication forgets the ids of messages the dispatcher
// already consumed (work-queue retention) once the server restarts, so
// after a restart an overlap re-read published everything in its window
// again. The set is bounded: by age (the overlap window plus slack) and by
// count (maxRecent; beyond it the stream's de-duplication still applies).
const (
	maxRecent   = 1000
	recentSlack = time.Minute
)

// recentID is a published row: its activity id and created_at.
type recentID struct {
	id        string
	createdAt time.Time
}

// recentKeep is how long a published id is remembered.
func (p *Poller) recentKeep() time.Duration {
	return max(p.cfg.OverlapWindow, DefaultOverlapWindow) + recentSlack
}

// mergeRecent returns old plus add, without ids created more than keep
// before now, at most maxRecent (the newest kept). The value maps an
// activity id to its created_at in Unix microseconds.
func mergeRecent(old map[string]int64, add []recentID, keep time.Duration, now time.Time) map[string]int64 {
	cut := now.Add(-keep).UnixMicro()
	type kv struct {
		id string
		at int64
	}
	all := make([]kv, 0, len(old)+len(add))
	seen := make(map[string]bool, len(old)+len(add))
	for _, a := range add {
		if at := a.createdAt.UnixMicro(); at >= cut && !seen[a.id] {
			seen[a.id] = true
			all = append(all, kv{a.id, at})
		}
	}
	for id, at := range old {
		if at >= cut && !seen[id] {
			seen[id] = true
			all = append(all, kv{id, at})
		}
	}
	if len(all) > maxRecent {
		sort.Slice(all, func(i, j int) bool { return all[i].at > all[j].at })
		all = all[:maxRecent]
	}
	if len(all) == 0 {
		return nil
	}
	out := make(map[string]int64, len(all))
	for _, e := range all {
		out[e.id] = e.at
	}
	return out
}

// alreadyPublished reports whether row is in the recent set of v.
func (v *cursorValue) alreadyPublished(row molecule.ActivityRow) bool {
	_, ok := v.Recent[row.ID]
	return ok && row.ID != ""
}

// sentSet is every activity id this process published and saw
// acknowledged within the recent window, in memory, without the count
// bound of the cursor's recent set.
//
// At 33 messages a second the overlap window holds 4,000 published rows,
// four times maxRecent. The rest relied on the inbound stream's
// de-duplication, which a restarted node forgets for consumed messages:
// under rolling node restarts, an overlap re-read on a stream leader that
// had restarted published 600 to 1,000 handled messages again (measured by
// make chaos-cluster), each one a dispatcher redelivery, a reply
// republished and a replier redelivery, queued in front of new messages.
// A poller that runs on remembers them here, and writes them to a
// snapshot that a restarted one reads (sentsnap.go).
//
// pending is the part of ids that no snapshot written by this process
// holds: what the cursor record must carry (saveCursor), so that a
// restarted poller knows every row either from the snapshot or from the
// cursor.
type sentSet struct {
	mu      sync.Mutex
	ids     map[string]int64 // activity id -> created_at, Unix µs
	pending map[string]int64 // the ids no saved snapshot holds
	// savedAt is when the last snapshot was written (sentsnap.go).
	savedAt time.Time
	// adopted: the stored cursor's recent ids joined pending (adopt).
	adopted bool
	// sweptAt is when ids and pending last dropped what is older than
	// keep (Unix µs of the now remember was given).
	sweptAt int64
}

// sentSweepEvery spaces the sweeps of a sentSet: one delivered page, a
// single row one at a time, would otherwise walk every remembered id
// (thousands over the keep window). An id older than keep stays at most
// this much longer; it is never re-read, since the overlap window is
// shorter than keep.
const sentSweepEvery = 10 * time.Second

// add remembers published rows, as not yet in a snapshot, and forgets
// those created more than keep before now.
func (s *sentSet) add(rows []recentID, keep time.Duration, now time.Time) {
	s.remember(rows, keep, now, true)
}

// remember adds rows to ids, and to pending when they may be in no
// snapshot; rows created more than keep before now are forgotten (by a
// sweep at most every sentSweepEvery).
func (s *sentSet) remember(rows []recentID, keep time.Duration, now time.Time, unsaved bool) {
	if len(rows) == 0 {
		return
	}
	cut := now.Add(-keep).UnixMicro()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[string]int64, len(rows))
	}
	if s.pending == nil {
		s.pending = make(map[string]int64)
	}
	if nowMicro := now.UnixMicro(); nowMicro-s.sweptAt >= sentSweepEvery.Microseconds() {
		s.sweptAt = nowMicro
		for _, m := range []map[string]int64{s.ids, s.pending} {
			for id, at := range m {
				if at < cut {
					delete(m, id)
				}
			}
		}
	}
	for _, r := range rows {
		if at := r.createdAt.UnixMicro(); r.id != "" && at >= cut {
			if unsaved {
				s.pending[r.id] = at
			}
			s.ids[r.id] = at
		}
	}
}

// adopt takes the recent ids of the stored cursor record (or of a
// checkpoint) as published and in no snapshot, once per process: the
// process that wrote them may have died before its snapshot did. Taken
// again later, a record written before this process's snapshot would put
// back into pending what that snapshot holds, for ever.
func (s *sentSet) adopt(recent map[string]int64, keep time.Duration, now time.Time) {
	s.mu.Lock()
	done := s.adopted
	s.adopted = true
	s.mu.Unlock()
	if done || len(recent) == 0 {
		return
	}
	s.add(recentRows(recent), keep, now)
}

// recentRows lists a recent set as rows.
func recentRows(recent map[string]int64) []recentID {
	rows := make([]recentID, 0, len(recent))
	for id, at := range recent {
		rows = append(rows, recentID{id: id, createdAt: time.UnixMicro(at)})
	}
	return rows
}

// unsaved returns the pending ids created within keep of now, at most
// maxRecent (the newest): the cursor record's recent set.
func (s *sentSet) unsaved(keep time.Duration, now time.Time) map[string]int64 {
	s.mu.Lock()
	rows := recentRows(s.pending)
	s.mu.Unlock()
	return mergeRecent(nil, rows, keep, now)
}

// all lists every remembered id, in a snapshot or not.
func (s *sentSet) all() []recentID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return recentRows(s.ids)
}

// has reports whether row was published by this process recently.
func (s *sentSet) has(row molecule.ActivityRow) bool {
	if row.ID == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[row.ID]
	return ok
}
