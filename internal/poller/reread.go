// Re-reading a recent window of the feed (overlap and follow-ups).

package poller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// window reads every row created in the last d and, when until is set,
// before until (since_secs queries answer newest-first; older pages
// continue with before_ts), oldest first, without repeats. When from is
// set, it stops after the page that reaches back to from: since_secs
// counts whole seconds, so its first second can be rows the caller has
// no use for. When it stops at its page cap (maxWindowPages), reached is
// the created_at of the oldest row it read (windowChunks reads on from
// there); zero otherwise.
func (p *Poller) window(ctx context.Context, w *workspace, d time.Duration, from, until time.Time, res *WorkspaceResult) (rows []molecule.ActivityRow, reached time.Time, err error) {
	secs := int(math.Ceil(d.Seconds()))
	secs = min(max(secs, 1), maxSinceSecs)
	var seen map[string]bool
	before, capped := until, false
	for i := 0; ; i++ {
		if i == maxWindowPages {
			capped = true
			break
		}
		page, err := p.activity(ctx, w, molecule.ActivityQuery{Type: activityType, SinceSecs: secs, Limit: p.cfg.PageLimit, BeforeTS: before}, res)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("poller: read the last %ds of activity: %w", secs, err)
		}
		if seen == nil { // sized by the first page: most windows are one
			seen = make(map[string]bool, len(page.Rows))
			rows = make([]molecule.ActivityRow, 0, len(page.Rows))
		}
		added := 0
		for _, r := range page.Rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				rows = append(rows, r)
				added++
			}
		}
		if !page.Full || added == 0 || (!from.IsZero() && page.Rows[0].CreatedAt.Before(from)) {
			break
		}
		// Rows sharing the oldest row's microsecond are read again and
		// dropped above; before_ts is exclusive.
		before = page.Rows[0].CreatedAt.Add(time.Microsecond)
	}
	slices.SortStableFunc(rows, func(a, b molecule.ActivityRow) int { return a.CreatedAt.Compare(b.CreatedAt) })
	if capped {
		reached = rows[0].CreatedAt
	}
	return rows, reached, nil
}

// onceSpan is a one-shot's overlap re-read (RunOnce), as overlapFrom's d
// and from. Nothing reads the feed between two one-shot runs, so a row
// that committed behind the previous run's cursor after that run's read
// is found by none of its re-reads, and by a re-read of the last
// OverlapWindow only when the next run comes within OverlapWindow. So the
// re-read also reaches back to OverlapWindow before the cursor this
// run's fetch started from (the checkpoint's, or the store's), however
// long ago that is: the window where such a row lies, as a long-running
// poller's re-reads cover it. (A run within OverlapEvery of the last
// re-read skips its own: its cursor is at most that much newer than the
// rows it would have found, well inside the OverlapWindow the next run
// reaches back.) d adds
// OverlapWindow for a platform clock ahead of this one; from (platform
// clock) stops the read there.
func (p *Poller) onceSpan(w *workspace, now time.Time) (d time.Duration, from time.Time) {
	d = p.cfg.OverlapWindow
	if w.fetchedFrom.IsZero() {
		return d, time.Time{}
	}
	from = w.fetchedFrom.Add(-p.cfg.OverlapWindow)
	if now.Sub(from) < d {
		return d, time.Time{} // the last OverlapWindow reaches further
	}
	return now.Sub(from) + p.cfg.OverlapWindow, from
}

// overlapFrom re-reads the rows created in the last d (OverlapWindow, a
// quick re-read's span, rereadSpan, or a one-shot's, onceSpan) up to the
// cursor, reading no further back than from (platform clock; zero: d
// alone) when d's whole seconds reach further, and publishes them
// again: rows the platform committed behind the cursor are delivered, the
// ones already published are recognised (or dropped by the inbound
// stream's de-duplication). The cursor is not moved.
//
// Rows after the cursor are not read: the next fetch reads every visible
// one, and one that commits later, behind a cursor moved past it, is
// behind the cursor of a later re-read. (With BatchRows they also belong
// to the next batches: a batch is answered and checkpointed before the
// next one is published.) The bound includes the cursor's own microsecond:
// since_id passes rows that share it.
func (p *Poller) overlapFrom(ctx context.Context, w *workspace, d time.Duration, from time.Time, res *WorkspaceResult) error {
	cur, err := p.loadCursor(ctx, w.id)
	if err != nil {
		return err
	}
	if cur.UpdatedAt.IsZero() {
		return nil // not seeded yet: nothing is ours to re-read
	}
	// From here on every row visible is visible to the re-read's pages,
	// and the cursor loaded was created before (rereadSpan).
	started := time.Now()
	p.sweepStaleOnce(ctx) // a restarted poller's first re-read
	w.published.load(ctx, cur.Recent)
	var until time.Time
	if cur.Cursor != "" && !cur.CreatedAt.IsZero() {
		until = cur.CreatedAt.Add(time.Microsecond)
	}
	res.Overlap = true
	before, read := res.Published, 0
	err = p.windowChunks(ctx, w, d, from, until, res, func(rows []molecule.ActivityRow, _ bool) error {
		read += len(rows)
		return p.deliver(ctx, w, rows, &cur.cursorValue, time.Now().UTC(), res)
	})
	if err != nil {
		return err
	}
	w.rereadAt, w.rereadFloor = started, time.Time{}
	if t := w.feedClock.atLeast(started); !t.IsZero() {
		w.rereadFloor = t.Add(-followUpSlack)
	}
	n := res.Published - before
	if n == 0 {
		w.log.DebugContext(ctx, "poller: overlap re-read", "reread", read, "new", 0)
		return nil
	}
	w.log.InfoContext(ctx, "poller: overlap re-read found rows the cursor had skipped (late commits)", "reread", read, "new", n)
	// Remember them, so the next re-read does not publish them again. The
	// cursor itself does not move; another poller's save wins.
	v := cur.cursorValue
	if _, err := p.saveCursor(ctx, w, cur, v); err != nil && !errors.Is(err, errCursorMoved) {
		return err
	}
	return nil
}

// windowChunks reads a window as window does (the last d, before until,
// back to from) and hands its rows to each a chunk at a time: one capped
// read (maxWindowPages), oldest first within the chunk, newer chunks
// first. Each chunk is handed over before the next is read, so memory
// stays bounded by one chunk while the whole window is read: a burst
// denser than the cap must not hide a late row behind it (the next quick
// re-read starts where this one started, rereadSpan, and would never
// reach it), nor a cold start's backlog its oldest rows. only is true when
// the window fitted in one chunk. An error of each ends the read.
func (p *Poller) windowChunks(ctx context.Context, w *workspace, d time.Duration, from, until time.Time, res *WorkspaceResult,
	each func(rows []molecule.ActivityRow, only bool) error) error {
	started := time.Now()
	for first := true; ; first = false {
		// since_secs is relative to now: it reaches as far back as at
		// the start.
		rows, reached, err := p.window(ctx, w, d+time.Since(started), from, until, res)
		if err != nil {
			return err
		}
		if err := each(rows, first && reached.IsZero()); err != nil {
			return err
		}
		if reached.IsZero() {
			return nil
		}
		until = reached.Add(time.Microsecond) // rows sharing its microsecond are read again, and recognised
		w.log.DebugContext(ctx, "poller: window read on past its page cap", "pages", maxWindowPages, "before", until)
	}
}

// rereadSpan is how far back a quick re-read starting at now looks (it
// stops at the cursor; overlap): to where this process's previous complete
// re-read started, less followUpSlack. A row that was not visible then was
// created at most its commit lag before it became visible, so no earlier;
// every row visible then and not after the cursor was read by it. So a
// burst's rows are re-read for about followUpSlack after the cursor passed
// them, not again from every follow-up's own activity.
//
// d is that span on this process's clock (since_secs is relative, so a
// skewed platform clock does not move it) and from the same edge on the
// platform's clock, as far as the feed has shown it (feedClock), zero if
// unknown: the re-read stops paging there instead of reading the rest of
// since_secs' last whole second. Before the first re-read of the process,
// d is fallback (the follow-up's window); never more than limit
// (OverlapWindow: the slow re-read's reach).
func (w *workspace) rereadSpan(now time.Time, fallback, limit time.Duration) (d time.Duration, from time.Time) {
	if w.rereadAt.IsZero() {
		return min(fallback, limit), time.Time{}
	}
	return min(now.Sub(w.rereadAt)+followUpSlack, limit), w.rereadFloor
}

// feedClock is a lower bound of the platform's clock: at (this process's
// clock) a read of the feed had returned a row created at created, so the
// platform's time was at least created then, and is at least created plus
// the time elapsed since. It keeps the reading that says the most (a
// window's older pages say less than its first), renewed at least every
// feedClockKeep so that a platform clock set back is followed.
type feedClock struct{ created, at time.Time }

const feedClockKeep = time.Minute

func (c *feedClock) note(created, at time.Time) {
	if created.IsZero() {
		return
	}
	if c.created.IsZero() || created.Sub(at) > c.created.Sub(c.at) || at.Sub(c.at) > feedClockKeep {
		c.created, c.at = created, at
	}
}

// atLeast is the platform's time at now, at least; zero if no read has
// returned a row yet.
func (c *feedClock) atLeast(now time.Time) time.Time {
	if c.created.IsZero() {
		return time.Time{}
	}
	return c.created.Add(now.Sub(c.at))
}
