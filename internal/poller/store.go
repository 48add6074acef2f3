package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/events"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
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
	// created_at (Unix µs), so that a re-read recognises them (recent.go).
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

// storeTimeout bounds one cursor or status operation, its tries included
// (stage.RetryRequest: each try is bounded by stage.AttemptTimeout). A
// read sent to a server or bucket leader that died is never answered: the
// cursor read waited the connection's default 10 s, once per node kill,
// while no message was polled; the next try reaches the new leader.
const storeTimeout = 20 * time.Second

func (p *Poller) loadCursor(ctx context.Context, ws string) (*cursorEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, err := stage.RetryGet(ctx, p.topo.Cursors, ws)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &cursorEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("poller: load cursor of %s: %w", ws, err)
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
// The rows published since (published) join the recent set.
func (p *Poller) saveCursor(ctx context.Context, ws string, cur *cursorEntry, v cursorValue, published []recentID) (*cursorEntry, error) {
	if v.Floor.IsZero() && v.FloorID == "" {
		v.Floor, v.FloorID = cur.Floor, cur.FloorID
	}
	v.Recent = mergeRecent(cur.Recent, published, p.recentKeep(), time.Now())
	data, err := v.marshal()
	if err != nil {
		return nil, err
	}
	var rev uint64
	// A try that timed out but was applied makes the next one conflict:
	// the cursor is then reloaded (errCursorMoved), as after another
	// poller's write.
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	err = stage.RetryRequest(sctx, func(ctx context.Context) error {
		var err error
		if cur.Revision == 0 {
			rev, err = p.topo.Cursors.Create(ctx, ws, data)
		} else {
			rev, err = p.topo.Cursors.Update(ctx, ws, data, cur.Revision)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return backoff.Permanent(err)
		}
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, errCursorMoved
	}
	if err != nil {
		return nil, fmt.Errorf("poller: save cursor of %s: %w", ws, err)
	}
	return &cursorEntry{cursorValue: v, Revision: rev}, nil
}

// statusRecord is the JSON value of a BucketPollerStatus key.
type statusRecord struct {
	Generation      string    `json:"generation,omitempty"`
	ProbedAt        time.Time `json:"probed_at,omitzero"`
	Registered      bool      `json:"registered,omitempty"`
	RegisteredAt    time.Time `json:"registered_at,omitzero"` // when the registration was asked for (poller clock)
	DeliveryMode    string    `json:"delivery_mode,omitempty"`
	LastPollAt      time.Time `json:"last_poll_at,omitzero"`
	LastPollError   string    `json:"last_poll_error,omitempty"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at,omitzero"`
	HeartbeatStatus string    `json:"heartbeat_status,omitempty"`
	HeartbeatError  string    `json:"heartbeat_error,omitempty"`
	LastOverlapAt   time.Time `json:"last_overlap_at,omitzero"`
	Paused          bool      `json:"paused,omitempty"`
	Removed         bool      `json:"removed,omitempty"`
	Stopped         string    `json:"stopped,omitempty"`
	LastError       string    `json:"last_error,omitempty"`
	LastErrorAt     time.Time `json:"last_error_at,omitzero"`
	UpdatedAt       time.Time `json:"updated_at"`
}

func (r *statusRecord) generation() molecule.Generation {
	switch r.Generation {
	case molecule.GenerationNew.String():
		return molecule.GenerationNew
	case molecule.GenerationOld.String():
		return molecule.GenerationOld
	}
	return molecule.GenerationUnknown
}

// heartbeating reports whether an earlier cycle, of any process, found the
// workspace ready and sent it a heartbeat, and nothing stopped it since: a
// one-shot cycle then heartbeats before its probe and state read.
func (r *statusRecord) heartbeating() bool {
	return !r.LastHeartbeatAt.IsZero() && !r.Removed && r.Stopped == ""
}

func loadStatus(ctx context.Context, kv jetstream.KeyValue, ws string) (statusRecord, uint64, error) {
	var r statusRecord
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, err := stage.RetryGet(ctx, kv, ws)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return r, 0, nil
	}
	if err != nil {
		return r, 0, fmt.Errorf("poller: load status of %s: %w", ws, err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return statusRecord{}, e.Revision(), nil // rewritten on the next update
	}
	return r, e.Revision(), nil
}

// statusRefresh is how old the stored LastPollAt and LastHeartbeatAt may
// grow before a cycle or a heartbeat that changed nothing else writes them
// again: a fleet of a thousand workspaces would otherwise write a thousand
// records per poll interval and per heartbeat to say nothing new.
const statusRefresh = time.Minute

// cachedStatus is a status record as this process last read or wrote it,
// and the revision it had then (0 when not known).
type cachedStatus struct {
	rec statusRecord
	rev uint64
}

// readStatus loads the stored status record of ws and remembers it for
// updateStatus.
func (p *Poller) readStatus(ctx context.Context, ws string) (statusRecord, error) {
	r, rev, err := loadStatus(ctx, p.topo.Status, ws)
	if err == nil && rev > 0 {
		p.statusCache.Store(ws, cachedStatus{rec: r, rev: rev})
	}
	return r, err
}

// sameStatus reports whether next says nothing that prev, as stored, does
// not: equal but for UpdatedAt, and for LastPollAt and LastHeartbeatAt
// having moved by less than statusRefresh.
func sameStatus(prev, next statusRecord) bool {
	if d := next.LastPollAt.Sub(prev.LastPollAt); d >= 0 && d < statusRefresh {
		next.LastPollAt = prev.LastPollAt
	}
	if d := next.LastHeartbeatAt.Sub(prev.LastHeartbeatAt); d >= 0 && d < statusRefresh {
		next.LastHeartbeatAt = prev.LastHeartbeatAt
	}
	next.UpdatedAt = prev.UpdatedAt
	// The record's fields are comparable; a time set anew compares unequal
	// even at the same instant (another location), which costs a write,
	// never a lost change.
	return prev == next
}

// updateStatus applies fn to the stored status record with compare-and-set,
// re-applying it on a conflict (fn must only set fields). It returns the
// record as written. When fn changes nothing of the record this process
// last read or wrote (sameStatus), nothing is read or written; when it
// does, the record is written on that revision without reading it first,
// and read only when another write came in between (the compare-and-set
// fails): a fleet's heartbeats refresh a thousand records a minute.
func (p *Poller) updateStatus(ctx context.Context, ws string, fn func(*statusRecord)) (statusRecord, error) {
	if v, ok := p.statusCache.Load(ws); ok {
		c := v.(cachedStatus)
		next := c.rec
		fn(&next)
		if sameStatus(c.rec, next) {
			return c.rec, nil
		}
		if c.rev > 0 {
			r, err := p.writeStatus(ctx, ws, next, c.rev)
			if !isConflict(err) {
				return r, err
			}
		}
	}
	var lastErr error
	for range 5 {
		r, rev, err := loadStatus(ctx, p.topo.Status, ws)
		if err != nil {
			return r, err
		}
		fn(&r)
		r, err = p.writeStatus(ctx, ws, r, rev)
		if !isConflict(err) {
			return r, err
		}
		lastErr = err
	}
	return statusRecord{}, fmt.Errorf("poller: save status of %s: too many concurrent updates: %w", ws, lastErr)
}

// writeStatus writes r as ws's status record on revision rev (0: create)
// in one bounded try, and remembers it. A conflict (also after a try that
// timed out but was applied) is returned as jetstream's error, for the
// caller to read the record and try again.
func (p *Poller) writeStatus(ctx context.Context, ws string, r statusRecord, rev uint64) (statusRecord, error) {
	r.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(r)
	if err != nil {
		return r, err
	}
	wctx, cancel := context.WithTimeout(ctx, stage.AttemptTimeout)
	defer cancel()
	if rev == 0 {
		rev, err = p.topo.Status.Create(wctx, ws, data)
	} else {
		rev, err = p.topo.Status.Update(wctx, ws, data, rev)
	}
	if err == nil {
		p.statusCache.Store(ws, cachedStatus{rec: r, rev: rev})
		return r, nil
	}
	if isConflict(err) {
		return r, err
	}
	return r, fmt.Errorf("poller: save status of %s: %w", ws, err)
}

func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// WorkspaceStatus is what the poller last observed of one workspace, read
// from the status and cursor buckets. It holds no token.
type WorkspaceStatus struct {
	WorkspaceID string `json:"workspace_id"`
	// Generation is "new", "old" or "unknown" (not probed or inconclusive).
	Generation string    `json:"generation"`
	ProbedAt   time.Time `json:"probed_at,omitzero"`
	// Registered is true once a poller registered the workspace, and
	// RegisteredAt is when it last asked for a registration.
	Registered   bool      `json:"registered"`
	RegisteredAt time.Time `json:"registered_at,omitzero"`
	// DeliveryMode is the mode the platform confirmed at registration.
	DeliveryMode string `json:"delivery_mode,omitempty"`
	// Cursor is the activity id of the newest row handled ("" before the
	// first row), with that row's created_at and when it was saved.
	Cursor          string    `json:"cursor,omitempty"`
	CursorCreatedAt time.Time `json:"cursor_created_at,omitzero"`
	CursorUpdatedAt time.Time `json:"cursor_updated_at,omitzero"`
	CursorRevision  uint64    `json:"cursor_revision,omitempty"`
	LastPollAt      time.Time `json:"last_poll_at,omitzero"`
	LastPollError   string    `json:"last_poll_error,omitempty"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at,omitzero"`
	// HeartbeatStatus is the platform's answer to the last heartbeat, and
	// HeartbeatError the failure of the last one that failed ("" if it
	// succeeded).
	HeartbeatStatus string    `json:"heartbeat_status,omitempty"`
	HeartbeatError  string    `json:"heartbeat_error,omitempty"`
	LastOverlapAt   time.Time `json:"last_overlap_at,omitzero"`
	Paused          bool      `json:"paused"`
	Removed         bool      `json:"removed"`
	// Stopped says why polling this workspace stopped: "removed",
	// "token_rejected", "old_platform", or "".
	Stopped     string    `json:"stopped,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	UpdatedAt   time.Time `json:"updated_at,omitzero"`
}

// ReadStatus reads the status and cursor buckets of topo for the given
// workspaces, in that order, or for every workspace either bucket knows,
// sorted by id, when ids is empty.
func ReadStatus(ctx context.Context, topo *events.Topology, ids ...string) ([]WorkspaceStatus, error) {
	if topo == nil || topo.Status == nil || topo.Cursors == nil {
		return nil, fmt.Errorf("%w: topology without status or cursor bucket", ErrInvalidConfig)
	}
	if len(ids) == 0 {
		set := map[string]bool{}
		for _, kv := range []jetstream.KeyValue{topo.Status, topo.Cursors} {
			keys, err := kv.Keys(ctx)
			if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
				return nil, fmt.Errorf("poller: list keys: %w", err)
			}
			for _, k := range keys {
				if !isSentKey(k) {
					set[k] = true
				}
			}
		}
		for k := range set {
			ids = append(ids, k)
		}
		sort.Strings(ids)
	}
	out := make([]WorkspaceStatus, 0, len(ids))
	for _, ws := range ids {
		r, _, err := loadStatus(ctx, topo.Status, ws)
		if err != nil {
			return nil, err
		}
		st := WorkspaceStatus{
			WorkspaceID: ws, Generation: r.generation().String(), ProbedAt: r.ProbedAt,
			Registered: r.Registered, RegisteredAt: r.RegisteredAt, DeliveryMode: r.DeliveryMode,
			LastPollAt: r.LastPollAt, LastPollError: r.LastPollError,
			LastHeartbeatAt: r.LastHeartbeatAt, HeartbeatStatus: r.HeartbeatStatus, HeartbeatError: r.HeartbeatError,
			LastOverlapAt: r.LastOverlapAt, Paused: r.Paused, Removed: r.Removed, Stopped: r.Stopped,
			LastError: r.LastError, LastErrorAt: r.LastErrorAt, UpdatedAt: r.UpdatedAt,
		}
		e, err := topo.Cursors.Get(ctx, ws)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, fmt.Errorf("poller: load cursor of %s: %w", ws, err)
		default:
			var cv cursorValue
			if json.Unmarshal(e.Value(), &cv) == nil {
				st.Cursor, st.CursorCreatedAt, st.CursorUpdatedAt = cv.Cursor, cv.CreatedAt, cv.UpdatedAt
			}
			st.CursorRevision = e.Revision()
		}
		out = append(out, st)
	}
	return out, nil
}
