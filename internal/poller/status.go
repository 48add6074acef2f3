// The status record (what the poller observed of a workspace) and its store.

package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/nats-io/nats.go/jetstream"
)

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
	// EventStream is the event stream's state (eventstream.go) since
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
// and the revision it had then (0 when not known); mem is the record as
// this process knows it now, with the times it did not write yet
// (sameStatus), shared by the copies that change only readAt or failedAt.
type cachedStatus struct {
	rec      statusRecord
	rev      uint64
	readAt   time.Time // when it was last read from the bucket
	failedAt time.Time // when the bucket last did not answer a read
	mem      *memStatus
}

// memStatus is changed in place: a heartbeat or an event that changes
// only a time (most of them) then allocates nothing. A new copy of the
// whole entry for each was a quarter of the idle relay's allocations at
// 10,000 workspaces (docs/fleet.md).
type memStatus struct {
	mu sync.Mutex
	r  statusRecord
}

// statusScratch holds the records updateStatus applies fn to.
var statusScratch = sync.Pool{New: func() any { return new(statusRecord) }}

func newCachedStatus(r statusRecord, rev uint64, readAt time.Time) *cachedStatus {
	return &cachedStatus{rec: r, rev: rev, readAt: readAt, mem: &memStatus{r: r}}
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
		c := v.(*cachedStatus)
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
		c := *v.(*cachedStatus)
		c.failedAt = time.Now()
		p.swapStatus(ws, v, &c)
		p.log.DebugContext(ctx, "poller: status bucket did not answer; going on with the record in memory", "workspace", ws, "error", err)
		return c.rec, nil
	case err == nil && rev > 0:
		p.swapStatus(ws, v, newCachedStatus(r, rev, time.Now()))
	}
	return r, err
}

// swapStatus replaces ws's cached record old (nil: none) with c, unless
// another goroutine replaced old meanwhile: a copy made from an older
// entry (a read that overtook a write, the heartbeat's unchanged refresh)
// must not undo a newer one. Such an undone registration made the next
// cycle register again, and the broadcasts' cold read then dropped what
// came between the two (TestLongBroadcastReachesHandlerWholeWhenItsEventWasSeen).
func (p *Poller) swapStatus(ws string, old any, c *cachedStatus) bool {
	if old == nil {
		_, loaded := p.statusCache.LoadOrStore(ws, c)
		return !loaded
	}
	return p.statusCache.CompareAndSwap(ws, old, c)
}

// sameStatus reports whether next says nothing that prev, as stored, does
// not: equal but for UpdatedAt, and for LastPollAt and LastHeartbeatAt
// having moved by less than StatusRefresh.
func sameStatus(prev, next *statusRecord) bool {
	n := *next
	if d := n.LastPollAt.Sub(prev.LastPollAt); d >= 0 && d < StatusRefresh {
		n.LastPollAt = prev.LastPollAt
	}
	if d := n.LastHeartbeatAt.Sub(prev.LastHeartbeatAt); d >= 0 && d < StatusRefresh {
		n.LastHeartbeatAt = prev.LastHeartbeatAt
	}
	if d := n.LastEventAt.Sub(prev.LastEventAt); d >= 0 && d < StatusRefresh {
		n.LastEventAt = prev.LastEventAt
	}
	n.UpdatedAt = prev.UpdatedAt
	// The record's fields are comparable; a time set anew compares unequal
	// even at the same instant (another location), which costs a write,
	// never a lost change.
	return *prev == n
}

// updateStatus applies fn to the stored status record with compare-and-set,
// re-applying it on a conflict (fn must only set fields). It returns the
// record as written. When fn changes nothing of the record this process
// last read or wrote (sameStatus), nothing is read or written; when it
// does, the record is written on that revision without reading it first,
// and read only when another write came in between (the compare-and-set
// fails): a fleet's heartbeats refresh a thousand records a minute.
//
// fn is applied to what this process knows (mem), so a write carries every
// time not written yet: the poll's, the heartbeat's and the last event's
// refreshes, each due every StatusRefresh on its own phase, go out in one
// write instead of three (at 10,000 workspaces about 100 fsynced writes a
// second, docs/fleet.md).
func (p *Poller) updateStatus(ctx context.Context, ws string, fn func(*statusRecord)) (statusRecord, error) {
	for v, ok := p.statusCache.Load(ws); ok; v, ok = p.statusCache.Load(ws) {
		// By pointer: this runs on every event of every stream, on the
		// stream's reading goroutine, whose stack (one per workspace) grows
		// with what this frame copies (docs/fleet.md).
		c := v.(*cachedStatus)
		next := statusScratch.Get().(*statusRecord) // a local would escape into fn: an allocation a call
		c.mem.mu.Lock()
		*next = c.mem.r
		fn(next)
		same := sameStatus(&c.rec, next)
		if same {
			c.mem.r = *next
		}
		c.mem.mu.Unlock()
		if same {
			statusScratch.Put(next)
			if now, _ := p.statusCache.Load(ws); now != v {
				continue // another goroutine's copy came meanwhile: apply fn to it
			}
			return c.rec, nil
		}
		if c.rev == 0 {
			statusScratch.Put(next)
			break
		}
		r, err := p.writeStatus(ctx, ws, *next, c.rev)
		statusScratch.Put(next)
		if !isConflict(err) {
			return r, err
		}
		break
	}
	var lastErr error
	for range 5 {
		seen, _ := p.statusCache.Load(ws)
		r, rev, err := loadStatus(ctx, p.topo.Status, ws)
		if err != nil {
			return r, err
		}
		p.swapStatus(ws, seen, newCachedStatus(r, rev, time.Now()))
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
		p.rememberWrite(ws, r, rev)
		return r, nil
	}
	if isConflict(err) {
		return r, err
	}
	return r, fmt.Errorf("poller: save status of %s: %w", ws, err)
}

// rememberWrite caches r as written on revision rev, unless the copy is
// already of that revision or a later one (a concurrent write that
// followed this one stored its record first).
func (p *Poller) rememberWrite(ws string, r statusRecord, rev uint64) {
	for {
		v, ok := p.statusCache.Load(ws)
		var readAt time.Time // the write keeps the copy true, not fresh: another writer is found by the next read
		if ok {
			c := v.(*cachedStatus)
			if c.rev >= rev {
				return
			}
			readAt = c.readAt
		}
		if p.swapStatus(ws, v, newCachedStatus(r, rev, readAt)) {
			return
		}
	}
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
				if !isSnapshotKey(k) {
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

// Status reads what the poller last observed of each configured workspace,
// in configuration order (ReadStatus for the configured ids).
func (p *Poller) Status(ctx context.Context) ([]WorkspaceStatus, error) {
	ids := make([]string, len(p.ws))
	for i, w := range p.ws {
		ids[i] = w.id
	}
	return ReadStatus(ctx, p.topo, ids...)
}
