// The snapshot of the recently published rows in the cursor bucket.

package poller

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// Why a snapshot of the sent set: the cursor record keeps only the newest
// maxRecent published ids (it is written on every page, so it must stay
// small), while an overlap re-read covers OverlapWindow (2 minutes, 4,000
// rows at 33 msg/s). A poller that restarted had only those 1,000 and
// published the older rows of its first re-read again; a restarted
// cluster node had forgotten them too (work-queue retention), so 600 to
// 1,036 handled messages went through the pipeline a second time.
//
// So the poller also writes the whole time-bounded set, compactly (about
// 19 bytes a row), to the status bucket under "<workspace>.published":
// once at least sentSnapshotMinRows rows wait in no snapshot, at most
// every sentSnapshotEvery, or sooner once sentSnapshotRows wait. The
// cursor record carries only the rows no snapshot of this process holds
// yet (sentSet.pending; saveCursor), so a restarted poller, which reads
// the snapshot before its first re-read and adopts the cursor's rows,
// knows every row from one or the other. Before, the cursor carried the
// newest maxRecent rows on every save: at ten messages a second, one per
// page, that was a 56 KB record written per message, about a third of
// what the relay spent on a message at that rate (docs/performance.md,
// "One message at a time"). A quiet workspace (fewer than
// sentSnapshotMinRows rows in the window) writes no snapshot: its few
// rows ride in the cursor record.
//
// Nothing here can hide a late row: a row is recognised only by its own
// activity id, which a row that was never published cannot have.
//
// A snapshot is worth something for recentKeep after it was written (its
// rows are no older than that then, and loadSent drops what has aged
// out). Nothing else deleted it, so a workspace busy once and quiet
// since, removed, or no longer configured kept its last snapshot (up to
// maxSnapshotRows, about 570 KB) for ever: each poller process deletes
// the snapshots written longer than recentKeep ago, of every workspace,
// once (sweepStaleSent, before its first loadSent), and loadSent deletes
// its own workspace's stale one. The sweep lists the snapshot keys with a
// watch, which the poller user of infra/nats/accounts.conf may do on the
// status bucket's snapshot keys only.
const (
	sentSnapshotEvery = 10 * time.Second
	sentSnapshotRows  = maxRecent / 2
	// sentSnapshotMinRows: fewer ids ride in the cursor record (about 3
	// KB) rather than cost a snapshot.
	sentSnapshotMinRows = 50
	// maxSnapshotRows keeps a snapshot under NATS's default 1 MB payload
	// (the newest rows are kept): 3 minutes at 160 msg/s.
	maxSnapshotRows = 30000
	sentKeySuffix   = ".published"
	sentFormat      = 1
)

// sentKey is the status bucket key of w's snapshot. Workspace ids are
// UUIDs: no workspace key has a dot (ReadStatus skips these keys).
func sentKey(ws string) string { return ws + sentKeySuffix }

// isSentKey reports whether a status bucket key is a snapshot.
func isSentKey(k string) bool { return strings.HasSuffix(k, sentKeySuffix) }

// snapshot returns the remembered rows created within keep of now,
// oldest first.
func (s *sentSet) snapshot(keep time.Duration, now time.Time) []recentID {
	cut := now.Add(-keep).UnixMicro()
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
func (s *sentSet) saved(rows []recentID, now time.Time) {
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
// record would otherwise carry at least sentSnapshotMinRows ids on every
// save, and either sentSnapshotEvery passed since the last snapshot or
// sentSnapshotRows rows wait for one.
func (s *sentSet) snapshotDue(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pending)
	return n >= sentSnapshotMinRows && (now.Sub(s.savedAt) >= sentSnapshotEvery || n >= sentSnapshotRows)
}

// saveSent writes w's snapshot when due. It is a cache of what was
// published: a failed write is logged at debug and tried again in a later
// cycle (the rows stay in the cursor record meanwhile, and the stream's
// de-duplication covers what that drops), and one bounded try never holds
// a cycle up for long while the cluster elects a leader.
func (p *Poller) saveSent(ctx context.Context, w *workspace) {
	now := time.Now()
	if !w.sent.snapshotDue(now) {
		return
	}
	rows := w.sent.snapshot(p.recentKeep(), now)
	wctx, cancel := context.WithTimeout(ctx, stage.AttemptTimeout)
	defer cancel()
	if _, err := p.topo.Status.Put(wctx, sentKey(w.id), encodeSent(rows)); err != nil {
		w.log.DebugContext(ctx, "poller: could not save the published-row snapshot; trying again later", "error", err)
		return
	}
	w.sent.saved(rows, now)
}

// loadSent reads w's snapshot into its sent set, once per process, before
// the first re-read, and adopts the cursor record's recent ids (recent).
// A missing key is an empty snapshot; a failed read is tried again before
// the next re-read.
//
// The cursor's ids count as in no snapshot (adopt), so a process that
// holds enough of them writes one soon: a poller restarted every few
// seconds publishes few rows in its life, and the ids of its predecessors
// must not ride in the cursor record for ever (make chaos-cluster with
// stage SIGKILLs once saw 1,036 rows republished by a poller that was the
// sixth in a minute, when the cursor record was the only place for them).
func (p *Poller) loadSent(ctx context.Context, w *workspace, recent map[string]int64) {
	if w.sentLoaded {
		return
	}
	p.sweptSent.Do(func() {
		if n, err := sweepStaleSent(ctx, p.topo.Status, p.recentKeep(), time.Now()); err != nil {
			p.log.DebugContext(ctx, "poller: could not sweep stale published-row snapshots; the next process tries again", "error", err)
		} else if n > 0 {
			p.log.DebugContext(ctx, "poller: deleted stale published-row snapshots", "count", n)
		}
	})
	lctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, err := stage.RetryGet(lctx, p.topo.Status, sentKey(w.id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		w.log.DebugContext(ctx, "poller: could not read the published-row snapshot; the re-read relies on the cursor's recent set", "error", err)
		return
	case e.Created().Before(time.Now().Add(-p.recentKeep())):
		// Written before the window: nothing in it is recent any more.
		// The sweep deletes such snapshots too, but it may not be allowed
		// to list the bucket (a least-privilege poller user).
		if derr := p.topo.Status.Delete(lctx, sentKey(w.id), jetstream.LastRevision(e.Revision())); derr != nil {
			w.log.DebugContext(ctx, "poller: could not delete a stale published-row snapshot", "error", derr)
		}
	default:
		rows, derr := decodeSent(e.Value())
		if derr != nil {
			w.log.WarnContext(ctx, "poller: unreadable published-row snapshot; ignored", "error", derr)
		}
		w.sent.remember(rows, p.recentKeep(), time.Now(), false) // saved already
	}
	w.sent.adopt(recent, p.recentKeep(), time.Now())
	w.sentLoaded = true
}

// SweepStaleSnapshots deletes the published-row snapshots in the status
// bucket kv written more than keep ago, as each poller process does once
// at its start, and returns how many it deleted. It is what a deployment's
// NATS permissions must allow the poller user (TestPermissions).
func SweepStaleSnapshots(ctx context.Context, kv jetstream.KeyValue, keep time.Duration) (int, error) {
	return sweepStaleSent(ctx, kv, keep, time.Now())
}

// sweepStaleSent deletes the snapshots in kv written more than keep
// before now, and returns how many it deleted. A snapshot written again
// meanwhile is kept (the delete is conditional on the revision read).
func sweepStaleSent(ctx context.Context, kv jetstream.KeyValue, keep time.Duration, now time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	w, err := kv.WatchFiltered(ctx, []string{"*" + sentKeySuffix}, jetstream.MetaOnly(), jetstream.IgnoreDeletes())
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

// encodeSent writes rows (oldest first) as: a format byte, then per row
// the uvarint of its created_at in µs after the previous row's (the first
// after zero), and its id: 0 and 16 bytes for a canonical UUID, else 1,
// the uvarint of its length and its bytes.
func encodeSent(rows []recentID) []byte {
	b := make([]byte, 0, 1+len(rows)*20)
	b = append(b, sentFormat)
	var prev int64
	for _, r := range rows {
		at := r.createdAt.UnixMicro()
		b = binary.AppendUvarint(b, uint64(max(at-prev, 0)))
		prev = max(at, prev)
		if u, ok := uuidBytes(r.id); ok {
			b = append(b, 0)
			b = append(b, u[:]...)
		} else {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(r.id)))
			b = append(b, r.id...)
		}
	}
	return b
}

func decodeSent(b []byte) ([]recentID, error) {
	if len(b) == 0 || b[0] != sentFormat {
		return nil, fmt.Errorf("poller: published-row snapshot of unknown format")
	}
	b = b[1:]
	var rows []recentID
	var at int64
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || len(b) < n+1 {
			return rows, fmt.Errorf("poller: truncated published-row snapshot")
		}
		at += int64(d)
		kind := b[n]
		b = b[n+1:]
		var id string
		switch kind {
		case 0:
			if len(b) < 16 {
				return rows, fmt.Errorf("poller: truncated published-row snapshot")
			}
			id = uuidString(b[:16])
			b = b[16:]
		case 1:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return rows, fmt.Errorf("poller: truncated published-row snapshot")
			}
			id = string(b[n : n+int(l)])
			b = b[n+int(l):]
		default:
			return rows, fmt.Errorf("poller: published-row snapshot: unknown id kind %d", kind)
		}
		rows = append(rows, recentID{id: id, createdAt: time.UnixMicro(at)})
	}
	return rows, nil
}

// uuidBytes parses a canonical lower-case UUID (the platform's activity
// ids); anything else (upper case included, so the id round-trips
// exactly) is not one.
func uuidBytes(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	if strings.ToLower(s) != s {
		return u, false
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, false
	}
	return u, true
}

func uuidString(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
