// What this relay published recently, so that a re-read recognises it
// instead of publishing it again: the one owner of that knowledge.

package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// SkipPublished is a row this relay already published, met again by an
// overlap or window re-read (recognised by published, without a publish).
const SkipPublished = "already_published"

// Why remember what was published: the inbound stream's de-duplication
// forgets the ids of messages the dispatcher already consumed (work-queue
// retention) once a server restarts, so an overlap re-read (OverlapWindow,
// 2 minutes: 4,000 rows at 33 msg/s) relied on it published handled rows
// again: under rolling node restarts 600 to 1,036 of them went through the
// pipeline a second time (make chaos-cluster), each a dispatcher
// redelivery, a reply republished and a replier redelivery.
//
// So a workspace's published rows are kept in three places, each holding
// what the others cannot, and only published reads or writes them:
//   - in memory, every row within keep (ids), for this process's re-reads;
//   - a snapshot of that set, compactly (about 19 bytes a row), in the
//     status bucket under "<workspace>.published": once at least
//     snapshotMinRows rows are in no snapshot, at most every snapshotEvery,
//     or sooner once snapshotRows wait;
//   - the cursor record, which carries only the rows no snapshot of this
//     process holds yet (pending; forCursor), at most maxRecent. It is
//     written with every page, so it must stay small: carrying the newest
//     maxRecent ids on every save was, at ten messages a second, a 56 KB
//     record per message, about a third of what the relay spent on a
//     message (docs/performance.md, "One message at a time"). A quiet
//     workspace writes no snapshot: its few rows ride in the cursor record.
//
// A restarted poller reads the snapshot before its first re-read and
// adopts the cursor record's ids (load), so it knows every row from one or
// the other. The cursor's ids count as in no snapshot, so a process that
// holds enough of them writes one soon: a poller restarted every few
// seconds publishes few rows in its life, and the ids of its predecessors
// must not ride in the cursor record for ever (make chaos-cluster with
// stage SIGKILLs once saw 1,036 rows republished by the sixth poller in a
// minute, when the cursor record was the only place for them).
//
// Nothing here can hide a late row: a row is recognised only by its own
// activity id, which a row that was never published cannot have. Beyond
// what is kept (maxRecent rows after a snapshot that failed), the stream's
// de-duplication still applies.
const (
	maxRecent   = 1000
	recentSlack = time.Minute
	// publishedSweepEvery spaces the sweeps of ids: one delivered page, a
	// single row one at a time, would otherwise walk every remembered id
	// (thousands over the keep window). An id older than keep stays at
	// most this much longer; it is never re-read, since the overlap window
	// is shorter than keep.
	publishedSweepEvery = 10 * time.Second

	snapshotEvery = 10 * time.Second
	snapshotRows  = maxRecent / 2
	// snapshotMinRows: fewer ids ride in the cursor record (about 3 KB)
	// rather than cost a snapshot.
	snapshotMinRows = 50
	// maxSnapshotRows keeps a snapshot under NATS's default 1 MB payload
	// (the newest rows are kept): 3 minutes at 160 msg/s.
	maxSnapshotRows   = 30000
	snapshotKeySuffix = ".published"
)

// recentID is a published row: its activity id and created_at.
type recentID struct {
	id        string
	createdAt time.Time
}

// published is what one workspace's poller published to the inbound
// stream and saw acknowledged within keep, and its snapshot.
type published struct {
	keep time.Duration
	kv   jetstream.KeyValue // the status bucket, which holds the snapshot
	key  string             // the snapshot's key (snapshotKey)
	log  *slog.Logger

	mu      sync.Mutex
	ids     map[string]int64 // activity id -> created_at, Unix µs
	pending map[string]int64 // the ids no snapshot of this process holds
	// savedAt is when the last snapshot was written.
	savedAt time.Time
	// adopted: a stored cursor record's ids joined pending (adopt).
	adopted bool
	// sweptAt is when ids and pending last dropped what is older than
	// keep (Unix µs of the now remember was given).
	sweptAt int64
	// loaded: the snapshot was read (load; the workspace's cycleMu).
	loaded bool
}

// newPublished returns the empty record of workspace ws, whose snapshot is
// kept in kv; rows are remembered for keep (recentKeep).
func newPublished(kv jetstream.KeyValue, ws string, keep time.Duration, log *slog.Logger) *published {
	return &published{kv: kv, key: snapshotKey(ws), keep: keep, log: log}
}

// recentKeep is how long a published id is remembered.
func (p *Poller) recentKeep() time.Duration {
	return max(p.cfg.OverlapWindow, DefaultOverlapWindow) + recentSlack
}

// recognises reports whether row was published recently: by this process,
// or by the one that wrote the cursor record read (its ids).
func (s *published) recognises(row molecule.ActivityRow, cursor *cursorValue) bool {
	if row.ID == "" {
		return false
	}
	if _, ok := cursor.Recent[row.ID]; ok {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[row.ID]
	return ok
}

// add remembers published rows, as in no snapshot yet, and forgets those
// created more than keep before now.
func (s *published) add(rows []recentID, now time.Time) {
	s.remember(rows, now, true)
}

// forCursor returns the ids the cursor record saved next carries: those
// in no snapshot, at most maxRecent (the newest). stored are the ids of
// the record it replaces, adopted the first time (adopt).
func (s *published) forCursor(stored map[string]int64, now time.Time) map[string]int64 {
	s.adopt(stored, now)
	s.mu.Lock()
	rows := recentRows(s.pending)
	s.mu.Unlock()
	return mergeRecent(nil, rows, s.keep, now)
}

// forCheckpoint returns a checkpoint's ids: those of the cursor record
// (cursor) and every one this process remembers, at most maxRecent (the
// newest).
func (s *published) forCheckpoint(cursor map[string]int64, now time.Time) map[string]int64 {
	return mergeRecent(cursor, s.snapshot(now), s.keep, now)
}

// remember adds rows to ids, and to pending when they may be in no
// snapshot; rows created more than keep before now are forgotten (by a
// sweep at most every publishedSweepEvery).
func (s *published) remember(rows []recentID, now time.Time, unsaved bool) {
	if len(rows) == 0 {
		return
	}
	cut := now.Add(-s.keep).UnixMicro()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[string]int64, len(rows))
	}
	if s.pending == nil {
		s.pending = make(map[string]int64)
	}
	if nowMicro := now.UnixMicro(); nowMicro-s.sweptAt >= publishedSweepEvery.Microseconds() {
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

// adopt takes the ids of the stored cursor record (or of a checkpoint) as
// published and in no snapshot, once per process: the process that wrote
// them may have died before its snapshot did. Taken again later, a record
// written before this process's snapshot would put back into pending what
// that snapshot holds, for ever.
func (s *published) adopt(recent map[string]int64, now time.Time) {
	s.mu.Lock()
	done := s.adopted
	s.adopted = true
	s.mu.Unlock()
	if done || len(recent) == 0 {
		return
	}
	s.add(recentRows(recent), now)
}

// snapshot returns the remembered rows created within keep of now, oldest
// first, at most maxSnapshotRows (the newest).
func (s *published) snapshot(now time.Time) []recentID {
	cut := now.Add(-s.keep).UnixMicro()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]recentID, 0, len(s.ids))
	for id, at := range s.ids {
		if at >= cut {
			out = append(out, recentID{id: id, createdAt: time.UnixMicro(at)})
		}
	}
	slices.SortFunc(out, func(a, b recentID) int { return a.createdAt.Compare(b.createdAt) })
	if len(out) > maxSnapshotRows {
		out = out[len(out)-maxSnapshotRows:]
	}
	return out
}

// saved records that a snapshot of rows was written at now: they leave
// pending, and the cursor record stops carrying them. Rows added while it
// was written stay.
func (s *published) saved(rows []recentID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		if at, ok := s.pending[r.id]; ok && at == r.createdAt.UnixMicro() {
			delete(s.pending, r.id)
		}
	}
	s.savedAt = now
}

// snapshotDue reports whether the set should be written now: the cursor
// record would otherwise carry at least snapshotMinRows ids on every save,
// and either snapshotEvery passed since the last snapshot or snapshotRows
// rows wait for one.
func (s *published) snapshotDue(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pending)
	return n >= snapshotMinRows && (now.Sub(s.savedAt) >= snapshotEvery || n >= snapshotRows)
}

// save writes the snapshot when due. It is a cache of what was published:
// a failed write is logged at debug and tried again in a later cycle (the
// rows stay in the cursor record meanwhile, and the stream's
// de-duplication covers what that drops), and one bounded try never holds
// a cycle up for long while the cluster elects a leader.
func (s *published) save(ctx context.Context) {
	now := time.Now()
	if !s.snapshotDue(now) {
		return
	}
	rows := s.snapshot(now)
	wctx, cancel := context.WithTimeout(ctx, stage.AttemptTimeout)
	defer cancel()
	if _, err := s.kv.Put(wctx, s.key, encodeSnapshot(rows)); err != nil {
		s.log.DebugContext(ctx, "poller: could not save the published-row snapshot; trying again later", "error", err)
		return
	}
	s.saved(rows, now)
}

// load reads the snapshot, once per process, before the first re-read,
// and adopts the stored cursor record's ids (stored). A missing key is an
// empty snapshot; a failed read is tried again before the next re-read.
// A snapshot written longer than keep ago holds nothing a re-read can
// meet: it is deleted (as sweepStaleSnapshots does, which a least-privilege
// poller user may not be allowed to run).
func (s *published) load(ctx context.Context, stored map[string]int64) {
	if s.loaded {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, err := stage.RetryGet(lctx, s.kv, s.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		s.log.DebugContext(ctx, "poller: could not read the published-row snapshot; the re-read relies on the cursor's recent set", "error", err)
		return
	case e.Created().Before(time.Now().Add(-s.keep)):
		if derr := s.kv.Delete(lctx, s.key, jetstream.LastRevision(e.Revision())); derr != nil {
			s.log.DebugContext(ctx, "poller: could not delete a stale published-row snapshot", "error", derr)
		}
	default:
		rows, derr := decodeSnapshot(e.Value())
		if derr != nil {
			s.log.WarnContext(ctx, "poller: unreadable published-row snapshot; ignored", "error", derr)
		}
		s.remember(rows, time.Now(), false) // saved already
	}
	s.adopt(stored, time.Now())
	s.loaded = true
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

// recentRows lists a recent set as rows.
func recentRows(recent map[string]int64) []recentID {
	rows := make([]recentID, 0, len(recent))
	for id, at := range recent {
		rows = append(rows, recentID{id: id, createdAt: time.UnixMicro(at)})
	}
	return rows
}

// snapshotKey is the status bucket key of workspace ws's snapshot.
// Workspace ids are UUIDs: no workspace key has a dot (ReadStatus skips
// these keys).
func snapshotKey(ws string) string { return ws + snapshotKeySuffix }

// isSnapshotKey reports whether a status bucket key is a snapshot.
func isSnapshotKey(k string) bool { return strings.HasSuffix(k, snapshotKeySuffix) }

// sweepStaleOnce deletes, once per process before its first snapshot is
// read, the snapshots of every workspace written longer than recentKeep
// ago: nothing else would delete that of a workspace busy once and quiet
// since, removed, or no longer configured (up to maxSnapshotRows, about
// 570 KB, each). The sweep lists the snapshot keys with a watch, which the
// poller user of infra/nats/accounts.conf may do on the status bucket's
// snapshot keys only.
func (p *Poller) sweepStaleOnce(ctx context.Context) {
	p.sweptSnapshots.Do(func() {
		if n, err := sweepSnapshotsBefore(ctx, p.topo.Status, p.recentKeep(), time.Now()); err != nil {
			p.log.DebugContext(ctx, "poller: could not sweep stale published-row snapshots; the next process tries again", "error", err)
		} else if n > 0 {
			p.log.DebugContext(ctx, "poller: deleted stale published-row snapshots", "count", n)
		}
	})
}

// SweepStaleSnapshots deletes the published-row snapshots in the status
// bucket kv written more than keep ago, as each poller process does once
// at its start, and returns how many it deleted. It is what a deployment's
// NATS permissions must allow the poller user (TestPermissions).
func SweepStaleSnapshots(ctx context.Context, kv jetstream.KeyValue, keep time.Duration) (int, error) {
	return sweepSnapshotsBefore(ctx, kv, keep, time.Now())
}

// sweepSnapshotsBefore deletes the snapshots in kv written more than keep
// before now, and returns how many it deleted. A snapshot written again
// meanwhile is kept (the delete is conditional on the revision read).
func sweepSnapshotsBefore(ctx context.Context, kv jetstream.KeyValue, keep time.Duration, now time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	w, err := kv.WatchFiltered(ctx, []string{"*" + snapshotKeySuffix}, jetstream.MetaOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("poller: list published-row snapshots: %w", err)
	}
	defer func() { _ = w.Stop() }()
	type stale struct {
		key string
		rev uint64
	}
	var old []stale
	for e := range w.Updates() {
		if e == nil {
			break // the initial values are all delivered
		}
		if e.Created().Before(now.Add(-keep)) {
			old = append(old, stale{e.Key(), e.Revision()})
		}
	}
	n := 0
	for _, s := range old {
		err := kv.Delete(ctx, s.key, jetstream.LastRevision(s.rev))
		switch {
		case err == nil:
			n++
		case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// written again since: fresh
		default:
			return n, fmt.Errorf("poller: delete stale snapshot %s: %w", s.key, err)
		}
	}
	return n, nil
}
