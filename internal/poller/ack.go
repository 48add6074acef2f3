// Acknowledging the feed to the platform (which rows the ack may cover).

package poller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Acks (docs/protocol.md, "The 2026-08 feed"; docs/guarantees.md). A
// 2026-08 platform prunes a row 7 days after it was created once the
// workspace has acked its seq, else after 30 days. An ack of seq S covers
// every row with a seq up to S, and seq is taken when a row is inserted,
// not when it commits: a row committed late carries a lower seq than rows
// already read. So the poller acks S only when
//
//   - every row it has seen with a seq up to S is settled: its deliver
//     succeeded (published to the inbound stream, dead-lettered, or
//     skipped on purpose), and
//   - S's row was created more than ackHorizon before the fetch that acks
//     began: the overlap re-reads that could still find a row committed
//     behind it (they reach OverlapWindow back) all ran before, and the
//     second OverlapWindow covers the platform's clock against ours and a
//     long transaction;
//   - the fetch read the feed to its end (not a batch with rows left).
//
// Besides the rows this process saw, the stored cursor's row qualifies
// under the same rule: every row before it was settled before the cursor
// moved past it, so a later run (connect --once, a Lambda invocation,
// a restart) acks what an earlier one handled.
//
// An ack never covers the newest checkpoint row this process wrote or
// restored (checkpoint.go): a fresh runner resumes from it, so it must
// outlive 7 days; a newer checkpoint lifts the ceiling to its own seq.
//
// At most one ack per overlap window and workspace, never out of the
// heartbeat's reserve of the rate budget. A platform without the
// endpoint (404) is not asked again by this process.

// ackState is what a workspace's poller knows to ack.
type ackState struct {
	mu        sync.Mutex
	settled   map[int64]time.Time // seq → created_at, above acked
	unsettled map[int64]bool      // seen in a deliver that failed
	acked     int64               // the platform's last_acked_seq, as it last answered
	ceiling   int64               // the newest checkpoint row's seq: acks stay below it (0: none)
	sentAt    time.Time           // the last ack request
	off       bool                // the platform answered 404 (read by note)
}

// note records the rows of one deliver: settled when it succeeded. Rows
// without a seq (platforms before 2026-08) are not tracked.
func (a *ackState) note(rows []molecule.ActivityRow, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.off {
		return
	}
	defer a.bound()
	for _, r := range rows {
		if r.Seq <= a.acked {
			continue
		}
		if !ok {
			if _, done := a.settled[r.Seq]; !done {
				if a.unsettled == nil {
					a.unsettled = map[int64]bool{}
				}
				a.unsettled[r.Seq] = true
			}
			continue
		}
		if a.settled == nil {
			a.settled = map[int64]time.Time{}
		}
		a.settled[r.Seq] = r.CreatedAt
		delete(a.unsettled, r.Seq)
	}
}

// maxSettled bounds the settled rows kept while none can be acked (a
// checkpoint's ceiling below them, or a failing ack).
const maxSettled = 20000

// bound drops the lower half of the settled rows past maxSettled. That is
// safe: an ack covers what lies below its seq whether or not it is listed;
// only the unsettled rows must never be forgotten.
func (a *ackState) bound() {
	if len(a.settled) <= maxSettled {
		return
	}
	seqs := slices.Sorted(maps.Keys(a.settled))
	for _, s := range seqs[:len(seqs)/2] {
		delete(a.settled, s)
	}
}

// protect keeps acks below seq, a checkpoint row's, when it is newer than
// the one protected so far.
func (a *ackState) protect(seq int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ceiling = max(a.ceiling, seq)
}

// candidate is the highest seq the rule lets an ack cover, created before
// cutoff, among the settled rows and the stored cursor's row; 0 when none
// is above acked.
func (a *ackState) candidate(cutoff time.Time, cursor *cursorValue) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	floor := a.ceiling // the lowest seq not to cover, 0 for none
	for s := range a.unsettled {
		if floor == 0 || s < floor {
			floor = s
		}
	}
	var best int64
	consider := func(s int64, created time.Time) {
		if s > best && s > a.acked && created.Before(cutoff) && (floor == 0 || s < floor) {
			best = s
		}
	}
	for s, created := range a.settled {
		consider(s, created)
	}
	if cursor != nil && cursor.Seq > 0 && !cursor.CreatedAt.IsZero() {
		consider(cursor.Seq, cursor.CreatedAt)
	}
	return best
}

// acknowledged records the platform's answer: nothing up to it is tracked
// any more.
func (a *ackState) acknowledged(stored int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acked = max(a.acked, stored)
	for s := range a.settled {
		if s <= a.acked {
			delete(a.settled, s)
		}
	}
	for s := range a.unsettled {
		if s <= a.acked {
			delete(a.unsettled, s)
		}
	}
}

// ackSpan is the overlap re-read's reach: ackEvery, and half of
// ackHorizon.
func (p *Poller) ackSpan() time.Duration {
	if p.cfg.OverlapWindow > 0 {
		return p.cfg.OverlapWindow
	}
	return DefaultOverlapWindow
}

// ack sends the workspace's ack when the rule allows one (see above);
// fetchStarted is when the fetch that read the feed to its end began. A
// failure costs nothing but the ack: it is tried again after ackEvery.
func (p *Poller) ack(ctx context.Context, w *workspace, fetchStarted time.Time, res *WorkspaceResult) {
	a := &w.acks
	if a.off || time.Since(a.sentAt) < p.ackSpan() {
		return
	}
	var cursor *cursorValue
	if cur, err := p.fetchedCursor(ctx, w); err == nil {
		cursor = &cur.cursorValue
	}
	seq := a.candidate(fetchStarted.Add(-2*p.ackSpan()), cursor)
	if seq == 0 || w.c.TakeBudget(p.cfg.RateReserve) > 0 {
		return // nothing new, or only the heartbeat's reserve is left
	}
	a.sentAt = time.Now()
	stored, err := w.c.AckActivity(ctx, seq)
	switch {
	case errors.Is(err, molecule.ErrNotFound):
		a.mu.Lock()
		a.off, a.settled, a.unsettled = true, nil, nil
		a.mu.Unlock()
		w.log.DebugContext(ctx, "poller: the platform has no activity ack (404); not acking", "error", err)
	case p.noteRateLimited(ctx, w, err, res):
	case err != nil:
		w.log.DebugContext(ctx, "poller: activity ack failed; trying again later", "acked_seq", seq, "error", err)
	default:
		a.acknowledged(stored)
		res.AckedSeq = seq
		w.log.DebugContext(ctx, "poller: acked the feed", "acked_seq", seq, "last_acked_seq", stored)
	}
}
