package replier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// reconcilePages caps how many feed pages one reconciliation reads.
const reconcilePages = 10

// notifyRow is the part of an own-notify activity row reconciliation reads
// (PROTOCOL.md Part 3 §5: method "notify", response_body.result = text,
// source_id null).
type notifyRow struct {
	Method       string          `json:"method"`
	ResponseBody json.RawMessage `json:"response_body"`
	CreatedAt    time.Time       `json:"created_at"`
}

// reconcileNotify reports whether the workspace's feed holds the notify
// row of this reply, created no earlier than postingAt - ReconcileSkew.
// The platform writes that row before it answers the notify, so its
// absence (after the post's timeout has passed) means the notify was not
// processed.
//
// Limitation: notify carries no idempotency key, so the row is matched by
// text. A second, identical reply text posted by this workspace in the same
// window would also match (and this reply would be taken as delivered).
func (r *Replier) reconcileNotify(ctx context.Context, j *job, postingAt time.Time) (bool, error) {
	since := postingAt.Add(-r.cfg.ReconcileSkew)
	secs := int(math.Ceil(time.Since(since).Seconds())) + 1
	q := molecule.ActivityQuery{Type: "a2a_receive", Source: "canvas", SinceSecs: secs, Limit: 500}
	for range reconcilePages {
		page, err := j.client.Activity(ctx, q)
		if err != nil {
			return false, err
		}
		for _, row := range page.Rows {
			var nr notifyRow
			if json.Unmarshal(row.JSON, &nr) != nil || nr.Method != "notify" {
				continue
			}
			created := nr.CreatedAt
			if created.IsZero() {
				created = row.CreatedAt
			}
			if created.Before(since) {
				continue
			}
			var body struct {
				Result string `json:"result"`
			}
			if json.Unmarshal(nr.ResponseBody, &body) == nil && body.Result == j.rep.Text {
				return true, nil
			}
		}
		if !page.Full || len(page.Rows) == 0 {
			return false, nil
		}
		oldest := page.Rows[0].CreatedAt
		if oldest.IsZero() || oldest.Before(since) {
			return false, nil
		}
		q.BeforeTS = oldest
	}
	return false, fmt.Errorf("%w: more than %d feed pages since the post; cannot tell whether it arrived", ErrReconcile, reconcilePages)
}

// ErrReconcile: the feed could not settle whether an earlier notify
// arrived; the reply is retried later and ends as an ambiguous dead letter
// if it never settles.
var ErrReconcile = errors.New("replier: cannot reconcile notify")
