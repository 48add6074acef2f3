package poller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/pkg/events"
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
	cur, err := p.loadCursor(ctx, w.id)
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
	p.loadSent(ctx, w, cur.Recent) // a restarted poller's first re-read
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

// skipReason says why a parsed row is not delivered, or "".
func skipReason(m *molecule.Message, allowSelf bool) string {
	if m.ActivityType != "" && m.ActivityType != activityType && m.Kind != molecule.KindBroadcast {
		return SkipOtherType
	}
	return m.Skip(allowSelf)
}

// deliver publishes rows (oldest first) asynchronously, each with
// Nats-Msg-Id <workspace>:<activity id>, and waits for every ack. Rows
// below the cursor's floor (backlog left undelivered at a cold start) are
// passed. Skipped
// rows are counted; malformed rows go to the dead-letter stream. Any
// failure returns an error, and the caller then does not advance the
// cursor.
func (p *Poller) deliver(ctx context.Context, w *workspace, rows []molecule.ActivityRow, floor *cursorValue, polledAt time.Time, res *WorkspaceResult) (err error) {
	defer func() { w.acks.note(rows, err == nil) }()
	var futures []pendingPublish
	for _, row := range rows {
		pub, err := p.publishRow(ctx, w, row, floor, polledAt, res)
		if err != nil {
			return err
		}
		if pub != nil {
			futures = append(futures, *pub)
		}
	}
	if len(futures) == 0 {
		return nil
	}
	mark := len(res.published)
	err = p.awaitAcks(ctx, futures, res)
	w.sent.add(res.published[mark:], p.recentKeep(), time.Now())
	return err
}

// pendingPublish is a publish of deliver whose acknowledgement is awaited.
type pendingPublish struct {
	f          jetstream.PubAckFuture
	activity   string
	createdAt  time.Time
	deadLetter bool
}

// publishRow publishes one row asynchronously: its inbound envelope, or a
// dead letter when it does not parse. A row that is skipped (before the
// floor, published already, our own notify, or skipped by kind) is
// counted and publishes nothing (nil).
func (p *Poller) publishRow(ctx context.Context, w *workspace, row molecule.ActivityRow, floor *cursorValue, polledAt time.Time, res *WorkspaceResult) (*pendingPublish, error) {
	if floor.excluded(row.ID, row.CreatedAt) {
		res.Skipped[SkipBeforeSeed]++
		return nil, nil
	}
	if floor.alreadyPublished(row) || w.sent.has(row) {
		res.Skipped[SkipPublished]++
		return nil, nil
	}
	if row.Method == "notify" && row.ID != "" {
		// Our own replies (half of a busy feed): skipped without the full
		// parse, as ParseRow would classify them (KindOwnNotify).
		res.Skipped[SkipOwnNotify]++
		p.checkForeignNotify(ctx, w, row)
		return nil, nil
	}
	m, perr := row.Parse(w.id) // reuses the split Activity made
	if perr != nil {
		return p.deadLetterRow(ctx, w, row, perr, res)
	}
	if reason := skipReason(m, p.cfg.AllowSelf); reason != "" {
		res.Skipped[reason]++
		return nil, nil
	}
	if m.ActivityID == "" {
		m.ActivityID = row.ID
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = row.CreatedAt
	}
	if m.Kind == molecule.KindBroadcast {
		m.Text = w.broadcastTexts.whole(m.SourceID, m.Summary, time.Now())
	}
	data, err := events.NewInbound(w.id, m, polledAt).Marshal()
	if err != nil {
		return nil, fmt.Errorf("poller: encode inbound %s: %w", m.ActivityID, err)
	}
	pctx, span := tracing.Start(ctx, "publish", trace.SpanKindProducer, attribute.String("molecule.activity_id", m.ActivityID))
	f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: events.InboundSubject(w.id), Data: data, Header: tracing.Header(pctx)},
		jetstream.WithMsgID(events.InboundMsgID(w.id, m.ActivityID)), jetstream.WithExpectStream(events.StreamInbound))
	span.End()
	if err != nil {
		return nil, fmt.Errorf("poller: publish inbound %s: %w", m.ActivityID, err)
	}
	return &pendingPublish{f: f, activity: m.ActivityID, createdAt: row.CreatedAt}, nil
}

// deadLetterRow publishes the dead letter of a row that does not parse,
// named by its id or, without one, by a hash of its content.
func (p *Poller) deadLetterRow(ctx context.Context, w *workspace, row molecule.ActivityRow, perr error, res *WorkspaceResult) (*pendingPublish, error) {
	res.Malformed++
	id := row.ID
	if id == "" {
		sum := sha256.Sum256(row.JSON)
		id = "sha256-" + hex.EncodeToString(sum[:12])
	}
	w.log.WarnContext(ctx, "poller: malformed activity row; sent to the dead-letter stream and skipped", "activity_id", id, "error", perr)
	dl := events.DeadLetter{
		Stage: events.StagePoller, WorkspaceID: w.id, ActivityID: row.ID, Reason: events.ReasonMalformed,
		Error: perr.Error(), Deliveries: 1, OriginalSubject: events.InboundSubject(w.id),
		Envelope: row.JSON, FailedAt: time.Now().UTC(),
	}
	f, err := dlq.PublishAsync(ctx, p.js, dl, "malformed:"+events.InboundMsgID(w.id, id))
	if err != nil {
		return nil, fmt.Errorf("poller: dead letter of row %s: %w", id, err)
	}
	return &pendingPublish{f: f, activity: id, deadLetter: true}, nil
}

// awaitAcks waits for every publish's acknowledgement (at most
// PublishTimeout in all) and counts the inbound ones as published or
// duplicates; it returns the first failure.
func (p *Poller) awaitAcks(ctx context.Context, futures []pendingPublish, res *WorkspaceResult) error {
	timer := time.NewTimer(p.cfg.PublishTimeout)
	defer timer.Stop()
	var firstErr error
	for _, pf := range futures {
		select {
		case ack := <-pf.f.Ok():
			switch {
			case pf.deadLetter:
			case ack.Duplicate:
				res.Duplicates++
			default:
				res.Published++
			}
			if !pf.deadLetter {
				res.published = append(res.published, recentID{pf.activity, pf.createdAt})
			}
		case err := <-pf.f.Err():
			if firstErr == nil {
				firstErr = fmt.Errorf("poller: publish of activity %s not acknowledged: %w", pf.activity, err)
			}
		case <-timer.C:
			return fmt.Errorf("poller: publish acknowledgements not received within %s", p.cfg.PublishTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return firstErr
}
