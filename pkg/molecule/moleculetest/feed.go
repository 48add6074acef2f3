package moleculetest

import (
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
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
	json         []byte // the row as the activity endpoint returns it
}

// feed is one workspace's activity_logs, indexed by created_at.
type feed struct {
	mu      sync.RWMutex
	rows    []*row // visible rows, ascending created_at (ties: commit order)
	byID    map[string]*row
	pending map[*row]struct{}
	last    time.Time // last created_at handed out
}

func newFeed() *feed {
	return &feed{byID: map[string]*row{}, pending: map[*row]struct{}{}}
}

// stampLocked assigns created_at = max(now, last+1µs).
func (f *feed) stampLocked(r *row) {
	t := nowMicro()
	if !t.After(f.last) {
		t = f.last.Add(time.Microsecond)
	}
	f.last = t
	r.createdAt = t
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

func (f *feed) insertLocked(r *row) {
	n := len(f.rows)
	if n == 0 || !r.createdAt.Before(f.rows[n-1].createdAt) {
		f.rows = append(f.rows, r)
	} else {
		i := sort.Search(n, func(i int) bool { return f.rows[i].createdAt.After(r.createdAt) })
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
		delete(f.byID, r.id)
	}
	f.rows = append([]*row(nil), f.rows[i:]...)
	for r := range f.pending {
		if r.createdAt.Before(before) {
			delete(f.pending, r)
		}
	}
}

// all returns visible and pending rows in created_at order.
func (f *feed) all() []*row {
	f.mu.RLock()
	out := append([]*row(nil), f.rows...)
	for r := range f.pending {
		out = append(out, r)
	}
	f.mu.RUnlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].createdAt.Before(out[j].createdAt) })
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

// query runs q. With sinceID it answers ascending rows created strictly
// after the cursor row; otherwise newest first. It returns the rows'
// pre-encoded JSON (immutable once committed, so the caller writes them
// after the lock is released), or false when the cursor is not on this
// feed.
func (f *feed) query(q *activityQuery) ([][]byte, bool) {
	var cutoff time.Time
	if q.sinceSecs > 0 {
		cutoff = time.Now().Add(-time.Duration(q.sinceSecs) * time.Second)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out [][]byte
	if q.sinceID != "" {
		c := f.byID[q.sinceID]
		if c == nil {
			return nil, false
		}
		start := sort.Search(len(f.rows), func(i int) bool { return f.rows[i].createdAt.After(c.createdAt) })
		out = make([][]byte, 0, min(q.limit, len(f.rows)-start))
		for i := start; i < len(f.rows) && len(out) < q.limit; i++ {
			if q.match(f.rows[i], cutoff) {
				out = append(out, f.rows[i].json)
			}
		}
		return out, true
	}
	end := len(f.rows)
	if q.hasBefore {
		end = sort.Search(len(f.rows), func(i int) bool { return !f.rows[i].createdAt.Before(q.before) })
	}
	out = make([][]byte, 0, min(q.limit, end))
	for i := end - 1; i >= 0 && len(out) < q.limit; i-- {
		r := f.rows[i]
		if q.sinceSecs > 0 && r.createdAt.Before(cutoff) {
			break
		}
		if q.match(r, cutoff) {
			out = append(out, r.json)
		}
	}
	return out, true
}

// encodeRowNew renders a row as the NEW platform does: keys in
// alphabetical order, request_body/response_body only when present.
func encodeRowNew(r *row) []byte {
	b := make([]byte, 0, 256+len(r.requestBody)+len(r.responseBody))
	b = append(b, `{"activity_type":`...)
	b = jsonappend.Quote(b, r.activityType)
	b = append(b, `,"created_at":"`...)
	b = append(b, formatTime(r.createdAt)...)
	b = append(b, `","duration_ms":`...)
	b = appendDuration(b, r)
	b = append(b, `,"error_detail":`...)
	b = appendNullString(b, r.errorDetail)
	b = append(b, `,"id":`...)
	b = jsonappend.Quote(b, r.id)
	b = append(b, `,"method":`...)
	b = appendMethod(b, r)
	b = appendBodies(b, r)
	b = append(b, `,"source_id":`...)
	b = appendNullString(b, r.sourceID)
	b = append(b, `,"status":`...)
	b = jsonappend.Quote(b, r.status)
	b = append(b, `,"summary":`...)
	b = jsonappend.Quote(b, r.summary)
	b = append(b, `,"target_id":`...)
	b = appendNullString(b, r.targetID)
	b = append(b, `,"workspace_id":`...)
	b = jsonappend.Quote(b, r.workspaceID)
	return append(b, '}')
}

// encodeRowOld renders a row in the key order observed on the OLD
// platform (docs/protocol.md §1).
func encodeRowOld(r *row) []byte {
	b := make([]byte, 0, 256+len(r.requestBody)+len(r.responseBody))
	b = append(b, `{"id":`...)
	b = jsonappend.Quote(b, r.id)
	b = append(b, `,"workspace_id":`...)
	b = jsonappend.Quote(b, r.workspaceID)
	b = append(b, `,"activity_type":`...)
	b = jsonappend.Quote(b, r.activityType)
	b = append(b, `,"source_id":`...)
	b = appendNullString(b, r.sourceID)
	b = append(b, `,"target_id":`...)
	b = appendNullString(b, r.targetID)
	b = append(b, `,"method":`...)
	b = appendMethod(b, r)
	b = append(b, `,"summary":`...)
	b = jsonappend.Quote(b, r.summary)
	b = appendBodies(b, r)
	b = append(b, `,"duration_ms":`...)
	b = appendDuration(b, r)
	b = append(b, `,"status":`...)
	b = jsonappend.Quote(b, r.status)
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
	return jsonappend.Quote(b, r.method)
}

func appendNullString(b []byte, v string) []byte {
	if v == "" {
		return append(b, "null"...)
	}
	return jsonappend.Quote(b, v)
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
