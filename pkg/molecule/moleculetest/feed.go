package moleculetest

import (
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// row is one activity_logs row. Everything but json is kept for filtering.
type row struct {
	id           string
	workspaceID  string
	activityType string
	sourceID     string // "" = null
	targetID     string // "" = null
	method       string
	methodNull   bool
	summary      string
	requestBody  []byte // nil = absent
	responseBody []byte // nil = absent
	durationMS   int
	hasDuration  bool
	status       string
	errorDetail  string // "" = null
	createdAt    time.Time
	// seq is activity_logs.seq (2026-08), taken from a server-wide
	// sequence when the row is inserted, not when it commits, so a late
	// row carries a lower seq than rows committed before it.
	seq int64
	// messageID is activity_logs.message_id, the key of the 2026-08
	// upsert ("" = none: always a new row).
	messageID string
	// attachments is include=peer_info's attachments[] (2026-08), nil for
	// none: written with json.
	attachments []byte
	json        []byte // the row as the activity endpoint returns it
}

// seqs is the identity sequence of activity_logs.seq: one for every
// server of the process, as the platform's is one for every workspace.
var seqs atomic.Int64

// feed is one workspace's activity_logs, indexed by created_at.
type feed struct {
	mu      sync.RWMutex
	rows    []*row // visible rows, ascending created_at (ties: commit order)
	byID    map[string]*row
	byMsg   map[string]*row // visible and pending rows by messageID
	pending map[*row]struct{}
	last    time.Time // last created_at handed out
	stamped int       // rows stamped
	ties    bool      // WithTimestampTies
}

func newFeed() *feed {
	return &feed{byID: map[string]*row{}, byMsg: map[string]*row{}, pending: map[*row]struct{}{}}
}

// stampLocked assigns created_at = max(now, last+1µs) and the next seq,
// and indexes the row by its messageID.
func (f *feed) stampLocked(r *row) {
	t := nowMicro()
	f.stamped++
	switch {
	case f.ties && f.stamped%2 == 0 && !f.last.IsZero():
		t = f.last // WithTimestampTies: the microsecond of the row before
	case !t.After(f.last):
		t = f.last.Add(time.Microsecond)
	}
	f.last = t
	r.createdAt = t
	r.seq = seqs.Add(1)
	if r.messageID != "" {
		f.byMsg[r.messageID] = r
	}
}

// merge is the 2026-08 upsert (enteros-core aeec8e47
// workspace-server/internal/handlers/activity.go:1148, ON CONFLICT
// (workspace_id, message_id) DO UPDATE): when a row (visible or still
// pending) has r's messageID, it takes r's outcome columns and keeps its
// id, created_at, seq, request_body and summary, and merge reports true;
// r is not inserted.
func (f *feed) merge(r *row, enc func(*row) []byte) (*row, bool) {
	if r.messageID == "" {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.byMsg[r.messageID]
	if old == nil {
		return nil, false
	}
	upd := *old
	if r.responseBody != nil {
		upd.responseBody = r.responseBody
	}
	// An error after an answer keeps the answer's outcome.
	if old.responseBody == nil || r.status != "error" {
		upd.status, upd.errorDetail = r.status, r.errorDetail
		if r.hasDuration {
			upd.durationMS, upd.hasDuration = r.durationMS, true
		}
	}
	upd.json = enc(&upd)
	*old = upd // under the write lock: readers copy json under the read lock
	return old, true
}

// commit stamps r and makes it visible at once.
func (f *feed) commit(r *row, enc func(*row) []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stampLocked(r)
	r.json = enc(r)
	f.insertLocked(r)
}

// reserve stamps r now but keeps it invisible until publish.
func (f *feed) reserve(r *row, enc func(*row) []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stampLocked(r)
	r.json = enc(r)
	f.pending[r] = struct{}{}
}

// publish makes a reserved row visible at its created_at position. It
// reports false when the row was pruned meanwhile.
func (f *feed) publish(r *row) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pending[r]; !ok {
		return false
	}
	delete(f.pending, r)
	f.insertLocked(r)
	return true
}

// after reports whether a orders after b on the feed's key (created_at,
// seq).
func after(a, b *row) bool {
	return a.createdAt.After(b.createdAt) || a.createdAt.Equal(b.createdAt) && a.seq > b.seq
}

func (f *feed) insertLocked(r *row) {
	n := len(f.rows)
	if n == 0 || after(r, f.rows[n-1]) {
		f.rows = append(f.rows, r)
	} else {
		i := sort.Search(n, func(i int) bool { return after(f.rows[i], r) })
		f.rows = append(f.rows, nil)
		copy(f.rows[i+1:], f.rows[i:])
		f.rows[i] = r
	}
	f.byID[r.id] = r
}

func (f *feed) prune(before time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := sort.Search(len(f.rows), func(i int) bool { return !f.rows[i].createdAt.Before(before) })
	for _, r := range f.rows[:i] {
		f.forgetLocked(r)
	}
	f.rows = append([]*row(nil), f.rows[i:]...)
	for r := range f.pending {
		if r.createdAt.Before(before) {
			delete(f.pending, r)
			f.forgetLocked(r)
		}
	}
}

func (f *feed) forgetLocked(r *row) {
	delete(f.byID, r.id)
	if r.messageID != "" && f.byMsg[r.messageID] == r {
		delete(f.byMsg, r.messageID)
	}
}

// all returns copies of the visible and pending rows in (created_at,
// seq) order.
func (f *feed) all() []row {
	f.mu.RLock()
	out := make([]row, 0, len(f.rows)+len(f.pending))
	for _, r := range f.rows {
		out = append(out, *r)
	}
	for r := range f.pending {
		out = append(out, *r)
	}
	f.mu.RUnlock()
	sort.SliceStable(out, func(i, j int) bool { return after(&out[j], &out[i]) })
	return out
}

// activityQuery is a parsed GET /activity query.
type activityQuery struct {
	typ       string
	source    string // "", "canvas", "agent"
	limit     int
	sinceID   string
	sinceSecs int
	peerID    string
	before    time.Time
	hasBefore bool
	// tuple: the cursor compares (created_at, seq) (2026-08).
	tuple bool
	// peerInfo: include=peer_info (2026-08).
	peerInfo bool
}

func (q *activityQuery) match(r *row, cutoff time.Time) bool {
	if q.typ != "" && r.activityType != q.typ {
		return false
	}
	switch q.source {
	case "canvas":
		if r.sourceID != "" {
			return false
		}
	case "agent":
		if r.sourceID == "" {
			return false
		}
	}
	if q.peerID != "" && r.sourceID != q.peerID && r.targetID != q.peerID {
		return false
	}
	if q.sinceSecs > 0 && r.createdAt.Before(cutoff) {
		return false
	}
	if q.hasBefore && !r.createdAt.Before(q.before) {
		return false
	}
	return true
}

// query runs q. With sinceID it answers ascending rows strictly after
// the cursor row (2026-08, q.tuple: after its (created_at, seq); before:
// created_at strictly greater); otherwise newest first. It calls emit for
// each row under the feed's read lock (emit copies what it needs; a row's
// json is immutable, replaced whole by merge) and reports false when the
// cursor is not on this feed.
func (f *feed) query(q *activityQuery, emit func(*row)) bool {
	var cutoff time.Time
	if q.sinceSecs > 0 {
		cutoff = time.Now().Add(-time.Duration(q.sinceSecs) * time.Second)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	if q.sinceID != "" {
		c := f.byID[q.sinceID]
		if c == nil {
			return false
		}
		start := sort.Search(len(f.rows), func(i int) bool {
			r := f.rows[i]
			return r.createdAt.After(c.createdAt) || q.tuple && r.createdAt.Equal(c.createdAt) && r.seq > c.seq
		})
		for i := start; i < len(f.rows) && n < q.limit; i++ {
			if q.match(f.rows[i], cutoff) {
				emit(f.rows[i])
				n++
			}
		}
		return true
	}
	end := len(f.rows)
	if q.hasBefore {
		end = sort.Search(len(f.rows), func(i int) bool { return !f.rows[i].createdAt.Before(q.before) })
	}
	for i := end - 1; i >= 0 && n < q.limit; i-- {
		r := f.rows[i]
		if q.sinceSecs > 0 && r.createdAt.Before(cutoff) {
			break
		}
		if q.match(r, cutoff) {
			emit(r)
			n++
		}
	}
	return true
}

// peerInfo is what include=peer_info adds to a row (2026-08): each
// member only when not empty.
type peerInfo struct {
	name, role, cardURL string
	attachments         []byte // a JSON array, nil for none
}

// encodeRowNew renders a row as the NEW platform does: keys in
// alphabetical order (a Go map), request_body/response_body only when
// present; seq from 2026-08 on, and pi's members when the read asked for
// include=peer_info.
func encodeRowNew(r *row, seq bool, pi *peerInfo) []byte {
	b := make([]byte, 0, 256+len(r.requestBody)+len(r.responseBody))
	b = append(b, `{"activity_type":`...)
	b = quoteJSON(b, r.activityType)
	if pi != nil && pi.cardURL != "" {
		b = append(b, `,"agent_card_url":`...)
		b = quoteJSON(b, pi.cardURL)
	}
	if pi != nil && pi.attachments != nil {
		b = append(b, `,"attachments":`...)
		b = append(b, pi.attachments...)
	}
	b = append(b, `,"created_at":"`...)
	b = append(b, formatTime(r.createdAt)...)
	b = append(b, `","duration_ms":`...)
	b = appendDuration(b, r)
	b = append(b, `,"error_detail":`...)
	b = appendNullString(b, r.errorDetail)
	b = append(b, `,"id":`...)
	b = quoteJSON(b, r.id)
	b = append(b, `,"method":`...)
	b = appendMethod(b, r)
	if pi != nil && pi.name != "" {
		b = append(b, `,"peer_name":`...)
		b = quoteJSON(b, pi.name)
	}
	if pi != nil && pi.role != "" {
		b = append(b, `,"peer_role":`...)
		b = quoteJSON(b, pi.role)
	}
	b = appendBodies(b, r)
	if seq {
		b = append(b, `,"seq":`...)
		b = strconv.AppendInt(b, r.seq, 10)
	}
	b = append(b, `,"source_id":`...)
	b = appendNullString(b, r.sourceID)
	b = append(b, `,"status":`...)
	b = quoteJSON(b, r.status)
	b = append(b, `,"summary":`...)
	b = quoteJSON(b, r.summary)
	b = append(b, `,"target_id":`...)
	b = appendNullString(b, r.targetID)
	b = append(b, `,"workspace_id":`...)
	b = quoteJSON(b, r.workspaceID)
	return append(b, '}')
}

// encodeRowOld renders a row in the key order observed on the OLD
// platform (docs/protocol.md §1).
func encodeRowOld(r *row) []byte {
	b := make([]byte, 0, 256+len(r.requestBody)+len(r.responseBody))
	b = append(b, `{"id":`...)
	b = quoteJSON(b, r.id)
	b = append(b, `,"workspace_id":`...)
	b = quoteJSON(b, r.workspaceID)
	b = append(b, `,"activity_type":`...)
	b = quoteJSON(b, r.activityType)
	b = append(b, `,"source_id":`...)
	b = appendNullString(b, r.sourceID)
	b = append(b, `,"target_id":`...)
	b = appendNullString(b, r.targetID)
	b = append(b, `,"method":`...)
	b = appendMethod(b, r)
	b = append(b, `,"summary":`...)
	b = quoteJSON(b, r.summary)
	b = appendBodies(b, r)
	b = append(b, `,"duration_ms":`...)
	b = appendDuration(b, r)
	b = append(b, `,"status":`...)
	b = quoteJSON(b, r.status)
	b = append(b, `,"error_detail":`...)
	b = appendNullString(b, r.errorDetail)
	b = append(b, `,"created_at":"`...)
	b = append(b, formatTime(r.createdAt)...)
	return append(b, `"}`...)
}

func appendDuration(b []byte, r *row) []byte {
	if !r.hasDuration {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, int64(r.durationMS), 10)
}

func appendMethod(b []byte, r *row) []byte {
	if r.methodNull {
		return append(b, "null"...)
	}
	return quoteJSON(b, r.method)
}

func appendNullString(b []byte, v string) []byte {
	if v == "" {
		return append(b, "null"...)
	}
	return quoteJSON(b, v)
}

// appendBodies appends the row's request_body and response_body members,
// each only when present (key order: request before response).
func appendBodies(b []byte, r *row) []byte {
	if r.requestBody != nil {
		b = append(b, `,"request_body":`...)
		b = append(b, r.requestBody...)
	}
	if r.responseBody != nil {
		b = append(b, `,"response_body":`...)
		b = append(b, r.responseBody...)
	}
	return b
}
