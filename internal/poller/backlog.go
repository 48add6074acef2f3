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

// isMessage reports whether a row would reach a handler: not skipped by
// kind (a row that does not parse counts: it becomes a dead letter).
func (p *Poller) isMessage(r molecule.ActivityRow, self string) bool {
	m, err := r.Parse(self)
	return err != nil || skipReason(m, p.cfg.AllowSelf) == ""
}
