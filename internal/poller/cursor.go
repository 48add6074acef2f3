// The cursor record (where the feed was read to) and its store.

package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/nats-io/nats.go/jetstream"
)

// errCursorMoved: the cursor's revision changed under us; another poller
// advanced it. Reload and restart from the new cursor, never overwrite.
var errCursorMoved = errors.New("poller: cursor advanced by another poller")

// cursorValue is the JSON value of a BucketCursors key (the workspace id).
//
// Cursor "" with UpdatedAt set is an "empty seed": the feed was empty at
// UpdatedAt, so every row the platform shows later is newer and is
// delivered (a cold start on an empty feed must not lose the first message).
type cursorValue struct {
	// Cursor is the activity id of the newest row handled.
	Cursor string `json:"cursor"`
	// CreatedAt is that row's created_at (platform clock).
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Seq is that row's seq (2026-08 platforms; 0 before, or unknown), what
	// a later run may ack (ack.go).
	Seq int64 `json:"seq,omitempty"`
	// UpdatedAt is when the poller saved this value (poller clock): every
	// row created before it, minus the overlap slack, has been handled.
	UpdatedAt  time.Time `json:"updated_at"`
	Generation string    `json:"generation,omitempty"`
	// Floor and FloorID mark where this poller's responsibility starts:
	// rows created before Floor (and the row FloorID itself) existed before
	// the cold start and were left undelivered on purpose (BacklogWindow),
	// so no later window read (overlap, 410 recovery) delivers them.
	Floor   time.Time `json:"floor,omitzero"`
	FloorID string    `json:"floor_id,omitempty"`
	// Recent maps the activity ids this relay recently published to their
	// created_at (Unix µs), so that a re-read recognises them (published.go).
	Recent map[string]int64 `json:"recent,omitempty"`
}

// excluded reports whether row lies below the floor.
func (v *cursorValue) excluded(id string, createdAt time.Time) bool {
	return (v.FloorID != "" && id == v.FloorID) || (!v.Floor.IsZero() && !createdAt.IsZero() && createdAt.Before(v.Floor))
}

// cursorEntry is a loaded cursor and its KV revision (0: no key yet).
type cursorEntry struct {
	cursorValue
	Revision uint64
}

// cachedCursor is a workspace's cursor as this process last loaded or
// saved it. unsaved: the value is ahead of the stored one, which is still
// at entry.Revision; the rows it covers were acknowledged by JetStream.
type cachedCursor struct {
	entry    cursorEntry
	unsaved  bool
	failedAt time.Time // when the bucket last did not answer
}

func (p *Poller) cachedCursor(ws string) (cachedCursor, bool) {
	v, ok := p.cursorCache.Load(ws)
	if !ok {
		return cachedCursor{}, false
	}
	return v.(cachedCursor), true
}

// loadCursor reads the workspace's cursor. Once this process has one, a
// read the cursor bucket does not answer within one try (its leader is
// being elected) returns that one instead of holding up the cycle: the
// cursor moves only by compare-and-set, so a stale one is found out by
// the next save (errCursorMoved), as another poller's move is. A cursor
// advanced while the bucket did not answer is returned as long as the
// stored one is still at its revision.
func (p *Poller) loadCursor(ctx context.Context, ws string) (*cursorEntry, error) {
	c, cached := p.cachedCursor(ws)
	if cached && time.Since(c.failedAt) < bucketRetryAfter {
		return &c.entry, nil
	}
	wait, known := storeTimeout, (*cursorEntry)(nil)
	if cached {
		wait, known = stage.AttemptTimeout, &c.entry
	}
	ce, err := p.readCursor(ctx, ws, wait, known)
	switch {
	case err != nil && cached && ctx.Err() == nil:
		c.failedAt = time.Now()
		p.cursorCache.Store(ws, c)
		p.log.DebugContext(ctx, "poller: cursor bucket did not answer; polling on from the cursor in memory", "workspace", ws, "error", err)
		return &c.entry, nil
	case err != nil:
		return nil, err
	case cached && c.unsaved && c.entry.Revision == ce.Revision:
		return &c.entry, nil
	}
	p.cursorCache.Store(ws, cachedCursor{entry: *ce})
	return ce, nil
}

// fetchCursor is the cursor a fetch starts from. After a first read, a
// fetch starts from this process's copy without reading the bucket: at
// 10,000 idle workspaces those reads were 83 a second, nearly all of an
// unchanged cursor, and a fetch that finds no row after the copy needs
// none (another poller that moved the cursor on did so past rows the feed
// would show). Before the first row is delivered, confirmCursor reads the
// stored cursor, and a cursor another poller moved (a group's hand-over,
// a second relay) restarts the fetch from it (errCursorMoved): no row is
// ever published from a copy the store has left behind. A copy not yet
// saved, one kept through a bucket outage, a cold or unseeded one, and
// one the checkpoint has still to be compared with are read as before.
func (p *Poller) fetchCursor(ctx context.Context, w *workspace) (*cursorEntry, error) {
	w.unconfirmed = 0
	c, cached := p.cachedCursor(w.id)
	if cached && w.cursorRead && !c.unsaved && c.failedAt.IsZero() && c.entry.Revision > 0 && !c.entry.UpdatedAt.IsZero() &&
		(w.caughtUp || c.entry.Cursor == "" || !p.cfg.ResumeFromCheckpoint) {
		w.unconfirmed = c.entry.Revision
		return &c.entry, nil
	}
	cur, err := p.loadCursor(ctx, w.id)
	w.cursorRead = err == nil
	return cur, err
}

// confirmCursor reads the stored cursor when the current fetch started
// from this process's copy (fetchCursor): errCursorMoved if another
// poller moved it since.
func (p *Poller) confirmCursor(ctx context.Context, w *workspace) error {
	rev := w.unconfirmed
	if rev == 0 {
		return nil
	}
	cur, err := p.loadCursor(ctx, w.id)
	if err != nil {
		return err
	}
	w.unconfirmed = 0
	if cur.Revision != rev {
		return errCursorMoved
	}
	return nil
}

// fetchedCursor is the cursor the last fetch ended at: the copy it
// started from when it found no row (and so read none), the stored one
// otherwise.
func (p *Poller) fetchedCursor(ctx context.Context, w *workspace) (*cursorEntry, error) {
	if c, ok := p.cachedCursor(w.id); ok && w.unconfirmed != 0 && c.entry.Revision == w.unconfirmed {
		return &c.entry, nil
	}
	return p.loadCursor(ctx, w.id)
}

// readCursor reads the stored cursor, retrying for at most wait. When
// the stored revision is known's (this process's copy), it returns a copy
// of known without decoding the value again: a revision is written once,
// and under a burst the cursor's recent ids (up to maxRecent) made its
// decode a few hundred allocations a cycle.
func (p *Poller) readCursor(ctx context.Context, ws string, wait time.Duration, known *cursorEntry) (*cursorEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	e, err := stage.RetryGet(ctx, p.topo.Cursors, ws)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &cursorEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("poller: load cursor of %s: %w", ws, err)
	}
	if known != nil && known.Revision == e.Revision() {
		same := *known
		return &same, nil
	}
	ce := &cursorEntry{Revision: e.Revision()}
	if err := json.Unmarshal(e.Value(), &ce.cursorValue); err != nil {
		// A value we cannot read is treated as no cursor, but the next write
		// still goes through compare-and-set on its revision.
		p.log.ErrorContext(ctx, "poller: unreadable cursor value; re-seeding", "workspace", ws, "error", err)
		return &cursorEntry{Revision: e.Revision()}, nil
	}
	return ce, nil
}

// saveCursor advances the cursor with compare-and-set: Create for a new key,
// Update on the loaded revision otherwise. A conflict returns errCursorMoved.
// The value's recent set is what w published that no snapshot holds yet
// (published.forCursor): deliver adds every acknowledged row to it before
// a save covers it.
//
// Every caller saves after JetStream acknowledged the rows the new value
// covers, so a save the cursor bucket does not answer within one try (its
// leader is being elected) is put off rather than waited for: the value
// is kept in memory, returned by loadCursor, and written by a later save
// (at most every bucketRetryAfter). Rows published meanwhile go on to the
// dispatchers; a poller that dies first re-reads them from the stored
// cursor and the inbound stream's de-duplication drops them, as after a
// crash between a publish and its cursor save. (Waited for, the cursor
// bucket's election held every new row for its 4 to 9 s: in make
// chaos-cluster, the largest single cause of messages over 2 s.)
func (p *Poller) saveCursor(ctx context.Context, w *workspace, cur *cursorEntry, v cursorValue) (*cursorEntry, error) {
	ws := w.id
	w.cursorMoves.Add(1) // before the write: a checkpoint that looks after it sees the move
	if v.Floor.IsZero() && v.FloorID == "" {
		v.Floor, v.FloorID = cur.Floor, cur.FloorID
	}
	now := time.Now()
	v.Recent = w.published.forCursor(cur.Recent, now)
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	c, cached := p.cachedCursor(ws)
	unsaved := cachedCursor{entry: cursorEntry{cursorValue: v, Revision: cur.Revision}, unsaved: true, failedAt: c.failedAt}
	if cached && time.Since(c.failedAt) < bucketRetryAfter {
		p.cursorCache.Store(ws, unsaved)
		return &unsaved.entry, nil
	}
	rev, err := p.writeCursor(ctx, ws, cur.Revision, data)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		p.cursorCache.Delete(ws)
		return nil, errCursorMoved
	case err != nil && ctx.Err() == nil && unanswered(err):
		if !c.unsaved {
			p.log.WarnContext(ctx, "poller: cursor not saved, the cursor bucket did not answer (a NATS leader election?); polling goes on from the cursor in memory and saves it once the bucket answers",
				"workspace", ws, "error", err)
		}
		unsaved.failedAt = time.Now()
		p.cursorCache.Store(ws, unsaved)
		return &unsaved.entry, nil
	case err != nil:
		return nil, fmt.Errorf("poller: save cursor of %s: %w", ws, err)
	}
	if c.unsaved {
		p.log.InfoContext(ctx, "poller: cursor saved again", "workspace", ws)
	}
	saved := cursorEntry{cursorValue: v, Revision: rev}
	p.cursorCache.Store(ws, cachedCursor{entry: saved})
	return &saved, nil
}

// writeCursor is the compare-and-set write of saveCursor, one try
// (stage.AttemptTimeout) with quick retries inside it. A try that timed
// out but was applied makes the next save conflict: the cursor is then
// reloaded (errCursorMoved), as after another poller's write.
func (p *Poller) writeCursor(ctx context.Context, ws string, revision uint64, data []byte) (uint64, error) {
	var rev uint64
	wctx, cancel := context.WithTimeout(ctx, stage.AttemptTimeout)
	defer cancel()
	err := stage.RetryRequest(wctx, func(ctx context.Context) error {
		var err error
		if revision == 0 {
			rev, err = p.topo.Cursors.Create(ctx, ws, data)
		} else {
			rev, err = p.topo.Cursors.Update(ctx, ws, data, revision)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return backoff.Permanent(err)
		}
		return err
	})
	return rev, err
}
