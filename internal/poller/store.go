package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
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

// bucketRetryAfter is how long a cycle goes on from what this process
// holds in memory (cursor, status record) after the bucket did not answer,
// before it asks the bucket again. While a cluster elects the bucket's
// leader (4 to 9 s after a node died, nats-server raft.go
// minElectionTimeoutDefault and maxElectionTimeoutDefault) every request
// costs a whole stage.AttemptTimeout; asking once per this interval lets
// the cycles in between publish at full speed.
const bucketRetryAfter = 2 * time.Second

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
// (sentSet.pending): deliver adds every acknowledged row to w.sent before
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
	if v.Floor.IsZero() && v.FloorID == "" {
		v.Floor, v.FloorID = cur.Floor, cur.FloorID
	}
	now := time.Now()
	w.sent.adopt(cur.Recent, p.recentKeep(), now)
	v.Recent = w.sent.unsaved(p.recentKeep(), now)
	data, err := v.marshal()
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

// unanswered says whether err is a request nobody answered (a stream
// without a leader, or a leader that died: a timeout, or no responders)
// rather than an answer. Only such a save is put off: a refusal (a user
// that may not write the bucket) would otherwise be put off forever, and
// a restarted poller would re-read ever more rows.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
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
	// EventStream is the event stream's state (streamhealth.go) since
	// EventStreamSince; LastEventAt the last event it delivered.
	EventStream      string    `json:"event_stream,omitempty"`
	EventStreamSince time.Time `json:"event_stream_since,omitzero"`
	EventStreamError string    `json:"event_stream_error,omitempty"`
	LastEventAt      time.Time `json:"last_event_at,omitzero"`
	// BroadcastCursor is the id of the newest broadcast_receive row
	// delivered (broadcast.go).
	BroadcastCursor string    `json:"broadcast_cursor,omitempty"`
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

// StatusRefresh is how old the stored LastPollAt and LastHeartbeatAt may
// grow before a cycle or a heartbeat that changed nothing else writes them
// again: a fleet of a thousand workspaces would otherwise write a thousand
// records per poll interval and per heartbeat to say nothing new. At one
// minute the refreshes alone were 25 KV writes a second at a thousand
// workspaces, a sixth of the idle relay's CPU (docs/performance.md, "An
// idle fleet"); a failed heartbeat or poll, a pause or a stop is still
// written at once, so an older time says only "nothing changed"; a time
// older than StatusRefresh plus the poll (or heartbeat) interval says that
// no poller polls (or heartbeats) the workspace any more.
const StatusRefresh = 5 * time.Minute

// cachedStatus is a status record as this process last read or wrote it,
// and the revision it had then (0 when not known).
type cachedStatus struct {
	rec      statusRecord
	rev      uint64
	readAt   time.Time // when it was last read from the bucket
	failedAt time.Time // when the bucket last did not answer a read
}

// statusReadEvery is how long a cycle goes on from the status record this
// process last read or wrote before it reads the record again. Only
// pollers write it, and this process's own writes keep its copy true; a
// second poller of the same workspace (two relays, a poller group's
// hand-over: PollWorkspace starts from a read) is seen at this process's
// next write, whose compare-and-set then fails and reads, or after this
// long. What a cycle reads there changes rarely (registration,
// generation, the last overlap re-read), and reading it on every
// safety-net cycle was 8 KV reads a second at a thousand workspaces.
const statusReadEvery = StatusRefresh

// readStatus returns the status record of ws: this process's copy while
// it is younger than statusReadEvery, otherwise the stored one, which it
// remembers for updateStatus. Once this process has one, a read the
// status bucket does not answer within one try (its leader is being
// elected) returns that one, and the bucket is asked again only after
// bucketRetryAfter: waiting for the election held up every new row.
func (p *Poller) readStatus(ctx context.Context, ws string) (statusRecord, error) {
	v, cached := p.statusCache.Load(ws)
	if cached {
		c := v.(cachedStatus)
		if time.Since(c.failedAt) < bucketRetryAfter || (c.rev > 0 && time.Since(c.readAt) < statusReadEvery) {
			return c.rec, nil
		}
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if cached {
		rctx, cancel = context.WithTimeout(ctx, stage.AttemptTimeout)
	}
	r, rev, err := loadStatus(rctx, p.topo.Status, ws)
	cancel()
	switch {
	case err != nil && cached && ctx.Err() == nil:
		c := v.(cachedStatus)
		c.failedAt = time.Now()
		p.statusCache.Store(ws, c)
		p.log.DebugContext(ctx, "poller: status bucket did not answer; going on with the record in memory", "workspace", ws, "error", err)
		return c.rec, nil
	case err == nil && rev > 0:
		p.statusCache.Store(ws, cachedStatus{rec: r, rev: rev, readAt: time.Now()})
	}
	return r, err
}

// sameStatus reports whether next says nothing that prev, as stored, does
// not: equal but for UpdatedAt, and for LastPollAt and LastHeartbeatAt
// having moved by less than StatusRefresh.
func sameStatus(prev, next statusRecord) bool {
	if d := next.LastPollAt.Sub(prev.LastPollAt); d >= 0 && d < StatusRefresh {
		next.LastPollAt = prev.LastPollAt
	}
	if d := next.LastHeartbeatAt.Sub(prev.LastHeartbeatAt); d >= 0 && d < StatusRefresh {
		next.LastHeartbeatAt = prev.LastHeartbeatAt
	}
	if d := next.LastEventAt.Sub(prev.LastEventAt); d >= 0 && d < StatusRefresh {
		next.LastEventAt = prev.LastEventAt
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
		p.statusCache.Store(ws, cachedStatus{rec: r, rev: rev, readAt: time.Now()})
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
		var readAt time.Time // the write keeps the copy true, not fresh: another writer is found by the next read
		if v, ok := p.statusCache.Load(ws); ok {
			readAt = v.(cachedStatus).readAt
		}
		p.statusCache.Store(ws, cachedStatus{rec: r, rev: rev, readAt: readAt})
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
	// EventStream is the state of the poller's event stream of the
	// workspace (StreamConnected, …; "" where none was recorded: a
	// one-shot poller, an older relay) since EventStreamSince, with why
	// it is reconnecting; LastEventAt is the last event it delivered,
	// refreshed every StatusRefresh like LastPollAt.
	EventStream      string    `json:"event_stream,omitempty"`
	EventStreamSince time.Time `json:"event_stream_since,omitzero"`
	EventStreamError string    `json:"event_stream_error,omitempty"`
	LastEventAt      time.Time `json:"last_event_at,omitzero"`
	Paused           bool      `json:"paused"`
	Removed          bool      `json:"removed"`
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
			LastOverlapAt: r.LastOverlapAt, Paused: r.Paused,
			EventStream: r.EventStream, EventStreamSince: r.EventStreamSince, EventStreamError: r.EventStreamError, LastEventAt: r.LastEventAt, Removed: r.Removed, Stopped: r.Stopped,
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
