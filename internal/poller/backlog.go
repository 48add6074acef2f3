// The cold start: seeding the cursor and bounding the backlog it answers.

package poller

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// SkipBacklogBound counts queued messages a cold start left undelivered
// because they lay beyond its bound: older than BacklogWindow, or older
// than the newest BacklogLimit messages. One WARN line says how many.
const SkipBacklogBound = "beyond_backlog_bound"

// backlogCountPages bounds the pages a cold start reads only to count the
// messages its bound leaves out (past BacklogLimit, or just before the
// window): past it the count is a lower bound ("at least").
const backlogCountPages = 5

// backlogScan is what a cold start learns from reading its backlog window
// newest first, before it delivers anything.
type backlogScan struct {
	// floor: rows created before it are not delivered (the window's start,
	// the oldest message within the limit, or the newest answer).
	floor   time.Time
	floorID string
	// answeredAt is the created_at of the newest own notify in the window
	// (zero if none): the workspace answered then, so what was queued
	// before had been read by whoever answered.
	answeredAt time.Time
	// overLimit and olderThanWindow count messages left out by each bound;
	// atLeast marks a count that stopped at backlogCountPages.
	overLimit, olderThanWindow int
	overAtLeast, olderAtLeast  bool
}

// boundBacklog decides, on a cold start with a backlog window, which of the
// queued rows are delivered, and sets v's floor accordingly; it returns the
// window left to read (from the floor). Rows are read newest first until:
//   - the workspace's own newest notify: it answered then, so the messages
//     queued before it are taken as answered (an earlier relay, or another
//     client such as the TypeScript channel, posted it; a notify carries no
//     id of the message it answers, so the time is the evidence);
//   - BacklogLimit messages: the older ones are left out, counted;
//   - the window's start: older messages are left out, counted.
//
// A checkpoint, when there is one, is the exact record and is used instead
// (restoreCheckpoint); this is the rule for a feed answered without them.
func (p *Poller) boundBacklog(ctx context.Context, w *workspace, window time.Duration, v *cursorValue, res *WorkspaceResult) (time.Duration, error) {
	start := time.Now().Add(-window).UTC()
	sc, err := p.scanBacklog(ctx, w, window, start, res)
	if err != nil {
		return 0, err
	}
	v.Floor, v.FloorID = sc.floor, sc.floorID
	if !sc.answeredAt.IsZero() {
		w.log.InfoContext(ctx, "poller: cold start; the workspace's newest reply on its feed is from an earlier relay or client: the messages queued before it are taken as answered and not delivered",
			"answered_up_to", sc.answeredAt)
	}
	if n := sc.overLimit + sc.olderThanWindow; n > 0 {
		res.Skipped[SkipBacklogBound] += n
		w.log.WarnContext(ctx, "poller: cold start; "+sc.dropped(p.cfg.BacklogLimit, window))
	}
	// Whole seconds, as since_secs counts them; the floor drops the rest.
	return time.Since(sc.floor) + time.Second, nil
}

// dropped says what the bound left out and which setting changes it.
func (sc backlogScan) dropped(limit int, window time.Duration) string {
	count := func(n int, atLeast bool) string {
		if atLeast {
			return fmt.Sprintf("at least %d", n)
		}
		return fmt.Sprint(n)
	}
	var parts []string
	if sc.overLimit > 0 {
		parts = append(parts, fmt.Sprintf("%s queued messages older than the newest %d not delivered (MOLECULE_BACKLOG_LIMIT raises the count)",
			count(sc.overLimit, sc.overAtLeast), limit))
	}
	if sc.olderThanWindow > 0 {
		parts = append(parts, fmt.Sprintf("%s queued messages older than %s not delivered (MOLECULE_BACKLOG_WINDOW widens the window)",
			count(sc.olderThanWindow, sc.olderAtLeast), window))
	}
	return strings.Join(parts, "; ")
}

// scanBacklog reads the window newest first (since_secs, before_ts paging)
// and finds the floor; it publishes nothing.
func (p *Poller) scanBacklog(ctx context.Context, w *workspace, window time.Duration, start time.Time, res *WorkspaceResult) (backlogScan, error) {
	sc := backlogScan{floor: start}
	limit := p.cfg.BacklogLimit
	secs := min(max(int(math.Ceil(window.Seconds())), 1), maxSinceSecs)
	seen := map[string]bool{}
	var before, lastKept time.Time
	messages, countPages := 0, 0
	for pages := 0; ; pages++ {
		if pages == maxWindowPages || countPages == backlogCountPages {
			sc.overAtLeast = sc.overLimit > 0
			return sc, nil // no evidence this far back: the window (or limit) is the floor
		}
		page, err := p.activity(ctx, w, molecule.ActivityQuery{Type: activityType, SinceSecs: secs, Limit: p.cfg.PageLimit, BeforeTS: before}, res)
		if err != nil {
			return sc, fmt.Errorf("poller: read the backlog window: %w", err)
		}
		if sc.overLimit > 0 {
			countPages++
		}
		added, reachedStart := 0, false
		for i := len(page.Rows) - 1; i >= 0 && !reachedStart; i-- { // rows are oldest first
			r := page.Rows[i]
			if seen[r.ID] {
				continue
			}
			seen[r.ID], added = true, added+1
			switch {
			case r.CreatedAt.Before(start):
				reachedStart = true // since_secs' whole seconds reach past the start
			case r.Method == "notify":
				sc.answeredAt = r.CreatedAt
				if sc.overLimit == 0 {
					sc.floor, sc.floorID = r.CreatedAt, r.ID
				}
				return sc, nil
			case !p.isMessage(r, w.id):
			case limit == 0 || messages < limit:
				messages++
				lastKept = r.CreatedAt
			case sc.overLimit == 0:
				sc.overLimit = 1
				sc.floor, sc.floorID = lastKept, r.ID
			default:
				sc.overLimit++
			}
		}
		if reachedStart || !page.Full || added == 0 {
			break
		}
		before = page.Rows[0].CreatedAt.Add(time.Microsecond) // rows of its microsecond are read again, and recognised
	}
	if sc.overLimit > 0 {
		return sc, nil // the limit, not the window, is the bound: what is older is left out as well
	}
	return sc, p.countOlder(ctx, w, start, &sc, res)
}

// countOlder counts the messages queued before the window's start, back to
// the workspace's newest answer: one page, so "at least" when it is full.
func (p *Poller) countOlder(ctx context.Context, w *workspace, start time.Time, sc *backlogScan, res *WorkspaceResult) error {
	page, err := p.activity(ctx, w, molecule.ActivityQuery{Type: activityType, SinceSecs: maxSinceSecs, Limit: p.cfg.PageLimit, BeforeTS: start}, res)
	if err != nil {
		return fmt.Errorf("poller: count the messages before the backlog window: %w", err)
	}
	for i := len(page.Rows) - 1; i >= 0; i-- {
		r := page.Rows[i]
		if r.Method == "notify" {
			return nil
		}
		if p.isMessage(r, w.id) {
			sc.olderThanWindow++
		}
	}
	sc.olderAtLeast = page.Full
	return nil
}

// seed sets a cursor when there is none (cold start, an empty seed, or a
// lost cursor after a 410), following docs/protocol.md §4: a query without
// since_id answers newest-first, and the NEWEST row becomes the cursor.
//
// Which existing rows are delivered:
//   - cold start: rows newer than BacklogWindow (none if it is 0), at most
//     the newest BacklogLimit, none queued before the workspace's newest
//     own reply (boundBacklog);
//   - empty seed (the feed was empty when seeded at UpdatedAt): every row
//     created since then, plus the overlap slack for late commits;
//   - cold start after this relay registered the workspace in poll mode
//     (this process, or an earlier run that ended before its first seed):
//     at least every row created since the registration was asked for;
//   - lost cursor: every row created since the cursor was last saved, plus
//     the overlap slack (any newer row would have advanced it, so these are
//     undelivered), and at least BacklogWindow.
func (p *Poller) seed(ctx context.Context, w *workspace, cur *cursorEntry, lost bool, res *WorkspaceResult) (*cursorEntry, error) {
	cold := cur.UpdatedAt.IsZero() // no cursor, or an unreadable one
	if cold && p.cfg.ResumeFromCheckpoint {
		restored, err := p.restoreCheckpoint(ctx, w, cur, res)
		if err != nil {
			return nil, err
		}
		if restored != nil && restored.Cursor != "" {
			return restored, nil // fetched from there on
		}
		if restored != nil { // the feed was empty then: an empty seed
			cur, cold = restored, false
		}
	}
	window := p.cfg.BacklogWindow
	v := cursorValue{Floor: cur.Floor, FloorID: cur.FloorID, Generation: res.Generation.String()}
	if cold {
		// Whatever was queued since this relay asked to register the
		// workspace was sent to a poll-mode agent — us — and is not backlog,
		// whatever the backlog window says. (The edge is our clock against
		// the platform's created_at: a platform clock behind ours by more
		// than the request's latency could still exclude a message queued
		// in that first instant.)
		reg, err := p.registeredAt(ctx, w)
		if err != nil {
			return nil, err
		}
		if !reg.IsZero() {
			window = max(window, time.Since(reg))
		}
	}
	if !cold {
		window = max(window, time.Since(cur.UpdatedAt)+max(p.cfg.OverlapWindow, 0))
	} else if window > 0 {
		// Rows older than the floor are not ours to deliver, not even by a
		// later overlap re-read (backlog.go). (Poller clock: a clock skew
		// with the platform shifts the window's edge by the skew.)
		var err error
		if window, err = p.boundBacklog(ctx, w, window, &v, res); err != nil {
			return nil, err
		}
	}
	var newest *molecule.ActivityRow
	var err error
	if window > 0 {
		v.Recent = cur.Recent // recognise what was published before a lost cursor
		newest, err = p.readBacklog(ctx, w, window, cold, &v, res)
	} else {
		newest, err = p.newestRow(ctx, w, &v, res)
	}
	if err != nil {
		return nil, err
	}
	v.UpdatedAt = time.Now().UTC()
	if newest != nil {
		v.Cursor, v.CreatedAt, v.Seq = newest.ID, newest.CreatedAt, newest.Seq
	} else if !cold && !lost {
		return cur, nil // still empty: keep the original seed time
	}
	ncur, err := p.saveCursor(ctx, w, cur, v)
	if err != nil {
		return nil, err
	}
	res.Cursor = ncur.Cursor
	return ncur, nil
}

// readBacklog delivers the rows created in the last window, with v as
// the floor, and returns the newest (nil if none): where the cursor
// lands. A backlog larger than one capped read is delivered whole, newer
// chunks first (windowChunks), before the cursor lands on its newest row:
// nothing would read what lies behind that cursor.
func (p *Poller) readBacklog(ctx context.Context, w *workspace, window time.Duration, cold bool, v *cursorValue, res *WorkspaceResult) (*molecule.ActivityRow, error) {
	var newest *molecule.ActivityRow
	before, read := res.Published, 0
	err := p.windowChunks(ctx, w, window, time.Time{}, time.Time{}, res, func(rows []molecule.ActivityRow, only bool) error {
		if b := p.cfg.BatchRows; b > 0 && only && len(rows) > b {
			// The oldest batch now; the cursor lands on its newest row and
			// the next batches are fetched from there. (A backlog of several
			// chunks is delivered whole: the batch would skip the older
			// chunks.)
			rows, res.More = rows[:b], true
		}
		if newest == nil && len(rows) > 0 {
			newest = &rows[len(rows)-1]
		}
		read += len(rows)
		if len(rows) == 0 {
			return nil
		}
		if err := p.confirmCursor(ctx, w); err != nil {
			return err
		}
		return p.deliver(ctx, w, rows, v, time.Now().UTC(), res)
	})
	if err != nil {
		return nil, err
	}
	if cold && read > 0 {
		// Rows read are not rows delivered: own notifies, rows below the
		// floor and duplicates are among them.
		w.log.InfoContext(ctx, "poller: cold start; read the backlog window", "rows_read", read,
			"published", res.Published-before, "window", window)
	}
	return newest, nil
}

// newestRow returns the feed's newest row (nil if none) and puts v's
// floor on it: a cold start with backlog window 0 delivers nothing older.
func (p *Poller) newestRow(ctx context.Context, w *workspace, v *cursorValue, res *WorkspaceResult) (*molecule.ActivityRow, error) {
	page, err := p.activity(ctx, w, molecule.ActivityQuery{Type: activityType, Limit: 1}, res)
	if err != nil {
		return nil, fmt.Errorf("poller: seed cursor: %w", err)
	}
	newest := page.Newest()
	if newest != nil {
		v.Floor, v.FloorID = newest.CreatedAt, newest.ID
		w.log.InfoContext(ctx, "poller: cold start; cursor seeded at the newest row, existing backlog not delivered (backlog window 0)")
	}
	return newest, nil
}

// registeredAt is when this relay last asked the platform to register w:
// this process's own registration, else the poll-mode registration the
// status bucket records (a one-shot run or Lambda invocation that ended
// before its first seed; the next one is a new Poller). Zero if none.
func (p *Poller) registeredAt(ctx context.Context, w *workspace) (time.Time, error) {
	if t := w.registeredSince(); !t.IsZero() {
		return t, nil
	}
	rec, _, err := loadStatus(ctx, p.topo.Status, w.id)
	if err != nil {
		return time.Time{}, err
	}
	if !rec.Registered || rec.DeliveryMode != string(molecule.DeliveryPoll) {
		return time.Time{}, nil
	}
	return rec.RegisteredAt, nil
}

// isMessage reports whether a row would reach a handler: not skipped by
// kind (a row that does not parse counts: it becomes a dead letter).
func (p *Poller) isMessage(r molecule.ActivityRow, self string) bool {
	m, err := r.Parse(self)
	return err != nil || skipReason(m, p.cfg.AllowSelf) == ""
}
