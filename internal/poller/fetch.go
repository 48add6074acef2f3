// Reading the feed after the cursor, paced by the rate budget.

package poller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

const (
	// maxCursorRestarts bounds how often one cycle reloads a cursor another
	// poller advanced before giving up until the next cycle.
	maxCursorRestarts = 5
	// maxRateLimitRetries bounds consecutive 429s waited out in one cycle.
	maxRateLimitRetries = 3
	// maxWindowPages bounds the pages of one since_secs window read: a
	// longer window is read on in chunks of it (windowChunks), each
	// published before the next is read, so memory stays bounded.
	maxWindowPages = 50
	// maxSinceSecs is the platform's cap on since_secs (30 days).
	maxSinceSecs = 30 * 24 * 3600
	// defaultRetryAfter is the wait after a 429 that named none.
	defaultRetryAfter = time.Second
	// maxRetryAfter caps one wait after a 429.
	maxRetryAfter = 65 * time.Second
)

// ErrRateWaitPastDeadline: the next request had to wait (for the rate
// budget's window to reset, or for a 429's Retry-After) until after the
// context's deadline, so it was not sent. pace returns it at once rather
// than sleeping until the deadline.
var ErrRateWaitPastDeadline = errors.New("poller: the rate-limit wait ends after the deadline")

// pace blocks until the workspace may send its next request: not before a
// 429's Retry-After, and not while taking one would leave the shared rate
// budget at RateReserve per workspace or below (molecule.Client.TakeBudget;
// until the window resets). When that wait would end after ctx's deadline
// it returns ErrRateWaitPastDeadline at once. Heartbeats never call it.
func (p *Poller) pace(ctx context.Context, w *workspace) error {
	for {
		until, why := w.getNotBefore(), "the platform's Retry-After"
		if time.Until(until) <= 0 {
			wait := w.c.TakeBudget(p.cfg.RateReserve)
			if wait <= 0 {
				return nil
			}
			// Once the window has reset, the observation is in the past.
			until, why = time.Now().Add(wait), "the rate budget is at its reserve until the window resets"
			w.log.DebugContext(ctx, "poller: rate budget at reserve; waiting for the window to reset",
				"remaining", w.c.RateLimit().Remaining, "reserve", p.cfg.RateReserve, "wait", time.Until(until).Round(time.Millisecond))
		}
		if dl, ok := ctx.Deadline(); ok && until.After(dl) {
			return fmt.Errorf("%w: %s (in %s; the deadline is in %s)", ErrRateWaitPastDeadline, why,
				time.Until(until).Round(time.Millisecond), time.Until(dl).Round(time.Millisecond))
		}
		t := time.NewTimer(time.Until(until))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// noteRateLimited records a 429: no activity request before its Retry-After.
func (p *Poller) noteRateLimited(ctx context.Context, w *workspace, err error, res *WorkspaceResult) bool {
	if !errors.Is(err, molecule.ErrRateLimited) {
		return false
	}
	res.RateLimited++
	d := molecule.RetryAfterOf(err)
	if d <= 0 {
		d = defaultRetryAfter
	}
	d = min(d, maxRetryAfter)
	w.setNotBefore(time.Now().Add(d))
	w.log.WarnContext(ctx, "poller: rate limited by the platform; backing off", "retry_after", d)
	return true
}

// activity reads one page, pacing first and waiting out up to
// maxRateLimitRetries consecutive 429s.
func (p *Poller) activity(ctx context.Context, w *workspace, q molecule.ActivityQuery, res *WorkspaceResult) (*molecule.ActivityPage, error) {
	for attempt := 0; ; attempt++ {
		if err := p.pace(ctx, w); err != nil {
			return nil, err
		}
		q.IncludePeerInfo = true // 2026-08 names the sender; older platforms ignore it
		page, err := w.c.Activity(ctx, q)
		if p.noteRateLimited(ctx, w, err, res) && attempt < maxRateLimitRetries {
			continue
		}
		if err != nil {
			return nil, err
		}
		res.Fetched += len(page.Rows)
		if r := page.Newest(); r != nil {
			w.feedClock.note(r.CreatedAt, time.Now())
		}
		return page, nil
	}
}

// fetch delivers every row after the cursor, page by page until a short
// page, advancing the cursor after each acknowledged page. A cursor moved
// by another poller is reloaded, never overwritten.
func (p *Poller) fetch(ctx context.Context, w *workspace, res *WorkspaceResult) error {
	started := time.Now()
	for restarts := 0; ; restarts++ {
		err := p.fetchFromCursor(ctx, w, res)
		if !errors.Is(err, errCursorMoved) {
			if err == nil && !res.More {
				p.ack(ctx, w, started, res)
			}
			return err
		}
		if restarts >= maxCursorRestarts {
			return fmt.Errorf("poller: cursor keeps moving under concurrent pollers: %w", err)
		}
		w.log.DebugContext(ctx, "poller: cursor advanced by another poller; reloading")
	}
}

func (p *Poller) fetchFromCursor(ctx context.Context, w *workspace, res *WorkspaceResult) error {
	cur, err := p.fetchCursor(ctx, w)
	if err != nil {
		return err
	}
	if !w.caughtUp && cur.Cursor != "" && p.cfg.ResumeFromCheckpoint {
		if cur, err = p.catchUpWithCheckpoint(ctx, w, cur, res); err != nil {
			return err
		}
	}
	if cur.Cursor == "" {
		if cur, err = p.seed(ctx, w, cur, false, res); err != nil {
			return err
		}
		if cur.Cursor == "" || res.More {
			return nil // the feed is empty (the seed marker remembers when), or a batch is full
		}
	}
	limit := p.cfg.PageLimit
	if b := p.cfg.BatchRows; b > 0 {
		limit = min(limit, b)
	}
	w.fetchedFrom = cur.CreatedAt
	for {
		res.Cursor = cur.Cursor
		page, err := p.activity(ctx, w, molecule.ActivityQuery{Type: activityType, SinceID: cur.Cursor, Limit: limit}, res)
		if errors.Is(err, molecule.ErrCursorLost) {
			if err := p.confirmCursor(ctx, w); err != nil {
				return err
			}
			w.log.WarnContext(ctx, "poller: the platform no longer knows the cursor row (410: pruned, or another workspace's id); resetting and re-seeding",
				"cursor", cur.Cursor)
			if cur, err = p.seed(ctx, w, cur, true, res); err != nil {
				return err
			}
			if cur.Cursor == "" || res.More {
				return nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("poller: fetch activity: %w", err)
		}
		if err := ignoredSinceID(page, cur.Cursor); err != nil {
			return err
		}
		if len(page.Rows) == 0 {
			return nil
		}
		if err := p.confirmCursor(ctx, w); err != nil {
			return err
		}
		if err := p.deliver(ctx, w, page.Rows, &cur.cursorValue, time.Now().UTC(), res); err != nil {
			return err
		}
		newest := page.Newest()
		cur, err = p.saveCursor(ctx, w, cur, cursorValue{
			Cursor: newest.ID, CreatedAt: newest.CreatedAt, Seq: newest.Seq, UpdatedAt: time.Now().UTC(), Generation: res.Generation.String(),
		})
		if err != nil {
			return err
		}
		res.Cursor = cur.Cursor
		if !page.Full {
			return nil
		}
		if p.cfg.BatchRows > 0 {
			res.More = true // the caller answers this batch first (FetchMore)
			return nil
		}
	}
}

// ignoredSinceID detects a platform that answered a since_id query as if
// the cursor were absent (an OLD platform that the probe could not
// identify): a newest-first answer, or the cursor row itself in the page.
// Polling on would redeliver the same rows forever.
func ignoredSinceID(page *molecule.ActivityPage, cursor string) error {
	if page.Descending && len(page.Rows) > 1 {
		return fmt.Errorf("poller: activity answered newest-first to a since_id query: %w", molecule.ErrOldPlatform)
	}
	for _, r := range page.Rows {
		if r.ID == cursor {
			return fmt.Errorf("poller: activity returned the cursor row itself to a since_id query: %w", molecule.ErrOldPlatform)
		}
	}
	return nil
}
