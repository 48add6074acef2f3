// Logging a repeated failure once per change.

package poller

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RepeatLogEvery is how often a failure that keeps repeating unchanged is
// logged again (with the count of repeats since it was last logged).
const RepeatLogEvery = 5 * time.Minute

// repeatLog logs a failure where it happens, once: a poll loop that meets
// the same error every few seconds would otherwise bury everything else.
// The failure is logged again when it changes, every RepeatLogEvery while
// it lasts, and a recovery is logged once.
type repeatLog struct {
	mu       sync.Mutex
	last     string
	loggedAt time.Time
	repeats  int // since the last line logged
	total    int // since the failure started
}

// failed logs err (with its cause and the operator's action) unless it is
// the same as the last failure and that was logged less than
// RepeatLogEvery ago.
func (r *repeatLog) failed(ctx context.Context, log *slog.Logger, msg string, err error) {
	cause, action := DiagnoseErr(err)
	text := err.Error()
	r.mu.Lock()
	now := time.Now()
	r.total++
	same := text == r.last
	if same && now.Sub(r.loggedAt) < RepeatLogEvery {
		r.repeats++
		r.mu.Unlock()
		return
	}
	repeats := r.repeats
	r.last, r.loggedAt, r.repeats = text, now, 0
	r.mu.Unlock()
	args := []any{"cause", cause, "error", text, "action", action}
	if same {
		args = append(args, "repeated", repeats+1, "every", RepeatLogEvery)
	}
	log.WarnContext(ctx, msg, args...)
}

// ok logs msg once after failures: the recovery.
func (r *repeatLog) ok(ctx context.Context, log *slog.Logger, msg string) {
	r.mu.Lock()
	total := r.total
	r.last, r.loggedAt, r.repeats, r.total = "", time.Time{}, 0, 0
	r.mu.Unlock()
	if total > 0 {
		log.InfoContext(ctx, msg, "failures", total)
	}
}
