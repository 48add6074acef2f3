package replier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrReconcile: the feed could not settle whether an earlier notify
// arrived. The reply is retried later; it ends as an ambiguous dead letter
// only when no delivery could read the feed.
var ErrReconcile = errors.New("replier: cannot reconcile notify")

// ErrFeedUnreadable matches an ErrReconcile whose cause is that the
// activity feed could not be read for the whole check (every page is
// retried within the check until ReconcileTimeout).
var ErrFeedUnreadable = errors.New("replier: the activity feed could not be read")

// notifyRow is the part of an own-notify activity row reconciliation reads
// (docs/protocol.md §6: method "notify", response_body.result = text,
// source_id null).
type notifyRow struct {
	Method       string          `json:"method"`
	ResponseBody json.RawMessage `json:"response_body"`
}

// inFlightUntil is when the latest post of rec stopped being in flight: the
// platform's answer, else the post's own deadline. Records written before
// the deadline was recorded fall back to PostingAt + NotifyTimeout.
func (r *Replier) inFlightUntil(rec events.ReplyRecord) time.Time {
	switch {
	case !rec.AnsweredAt.IsZero():
		return rec.AnsweredAt
	case !rec.Deadline.IsZero():
		return rec.Deadline
	}
	return rec.PostingAt.Add(r.cfg.NotifyTimeout)
}

// reconcileWindow is the span of the feed where the notify row of rec's
// latest post can be: from its start to the end of its flight, widened on
// both sides by the clock skew between this host and the platform. Earlier
// attempts were each settled before the next post started, so they need no
// search.
func (r *Replier) reconcileWindow(rec events.ReplyRecord) (lo, hi time.Time) {
	return rec.PostingAt.Add(-r.cfg.ReconcileSkew), r.inFlightUntil(rec).Add(r.cfg.ReconcileSkew)
}

// reconcileNotify reports whether the workspace's feed holds the notify
// row of rec's latest post. The platform writes that row before it answers
// the notify, so its absence after the post stopped being in flight means
// the notify was not processed.
//
// The search reads only the window of reconcileWindow, newest first from
// before_ts = its end (the platform's only upper bound; DESC is its order
// without since_id) down to its start, page after page until the window is
// exhausted. Its cost is the number of canvas rows created in the window,
// not the time since the post. Each page is retried within the check.
//
// Limitation: notify carries no idempotency key, so the row is matched by
// text. A second, identical reply text posted by this workspace in the same
// window would also match (and this reply would be taken as delivered).
func (r *Replier) reconcileNotify(ctx context.Context, j *job, rec events.ReplyRecord) (bool, error) {
	lo, hi := r.reconcileWindow(rec)
	q := molecule.ActivityQuery{Type: "a2a_receive", Source: "canvas", Limit: molecule.MaxActivityLimit, BeforeTS: hi}
	for pageNo := 1; ; pageNo++ {
		// since_secs bounds the last page from below on the platform's side.
		q.SinceSecs = int(math.Ceil(time.Since(lo).Seconds())) + 1
		page, err := r.readPage(ctx, j, q)
		if err != nil {
			return false, fmt.Errorf("%w: %w: page %d of the window %s..%s: %w", ErrReconcile, ErrFeedUnreadable,
				pageNo, lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano), err)
		}
		oldest, ok, err := scanPage(page, q.BeforeTS, lo, j.rep.Text)
		switch {
		case err != nil:
			return false, fmt.Errorf("%w: page %d: %w", ErrReconcile, pageNo, err)
		case ok:
			return true, nil
		case !page.Full || oldest.IsZero() || oldest.Before(lo):
			return false, nil
		}
		// The next page ends just after the oldest row seen, so rows
		// sharing its microsecond that did not fit on this page are read;
		// the few seen twice are harmless.
		next := oldest.Add(time.Microsecond)
		if !next.Before(q.BeforeTS) {
			return false, fmt.Errorf("%w: a full page of rows within one microsecond at %s; cannot page past it", ErrReconcile, oldest.Format(time.RFC3339Nano))
		}
		q.BeforeTS = next
	}
}

// scanPage looks for the notify row of text among the rows of page created
// at or after lo. It returns the oldest dated row's time. A row dated at or
// after before (the page's before_ts) means the platform ignores before_ts;
// the window cannot be bounded and the check says so rather than guess.
func scanPage(page *molecule.ActivityPage, before, lo time.Time, text string) (oldest time.Time, found bool, err error) {
	for _, row := range page.Rows {
		if !row.CreatedAt.IsZero() {
			if !row.CreatedAt.Before(before) {
				return oldest, false, fmt.Errorf("row %s dated %s is not before before_ts %s: the platform ignores before_ts",
					row.ID, row.CreatedAt.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano))
			}
			if oldest.IsZero() || row.CreatedAt.Before(oldest) {
				oldest = row.CreatedAt
			}
		}
		if row.Method != "notify" || (!row.CreatedAt.IsZero() && row.CreatedAt.Before(lo)) {
			continue
		}
		var nr notifyRow
		if json.Unmarshal(row.JSON, &nr) != nil {
			continue
		}
		var body struct {
			Result string `json:"result"`
		}
		if json.Unmarshal(nr.ResponseBody, &body) == nil && body.Result == text {
			return oldest, true, nil
		}
	}
	return oldest, false, nil
}

// readPage reads one feed page, retrying any failure but a refusal until
// ctx ends: a check of k pages must not succeed only with probability
// (1 - error rate)^k. A Retry-After the platform gave is waited out.
func (r *Replier) readPage(ctx context.Context, j *job, q molecule.ActivityQuery) (*molecule.ActivityPage, error) {
	var page *molecule.ActivityPage
	op := func() error {
		p, err := j.client.Activity(ctx, q)
		if err == nil {
			page = p
			return nil
		}
		if refusedRead(err) {
			return backoff.Permanent(err)
		}
		if ra := molecule.RetryAfterOf(err); ra > 0 {
			t := time.NewTimer(ra)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		return err
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second),
		backoff.WithMaxElapsedTime(0),
	)
	err := backoff.Retry(op, backoff.WithContext(b, ctx))
	return page, err
}

// refusedRead: a 4xx other than 429 (a revoked token, a removed workspace,
// a query the platform rejects) that re-reading cannot change.
func refusedRead(err error) bool {
	if errors.Is(err, molecule.ErrInvalidArgument) {
		return true
	}
	s := molecule.StatusOf(err)
	return s >= 400 && s < 500 && s != http.StatusTooManyRequests
}
