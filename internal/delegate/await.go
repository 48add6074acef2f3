package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// await watches the record until it is answered or deadline passes, with
// the dispatcher slot given back meanwhile (stage.Park). On the deadline
// the record is abandoned, unless the answer won the race.
func (a *Asker) await(ctx context.Context, key, id string, deadline time.Time, log *slog.Logger) (*handler.PeerAnswer, error) {
	var ans *events.AskAnswer
	var err error
	stage.Park(ctx, func() {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		ans, err = a.watch(wctx, key)
	})
	if ans != nil {
		log.InfoContext(ctx, "delegate: answered", "answer_activity", ans.ActivityID)
		return peerAnswer(id, ans), nil
	}
	if ctx.Err() == nil && err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	// Give up, unless the answer arrived in the meantime.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec, uerr := update(octx, a.cfg.Asks, key, func(r *events.AskRecord) bool {
		if r.State != events.AskPending {
			return false
		}
		r.State = events.AskAbandoned
		return true
	})
	if uerr == nil && rec.State == events.AskAnswered {
		return peerAnswer(id, rec.Answer), nil
	}
	if uerr != nil {
		log.WarnContext(ctx, "delegate: ask record not marked abandoned; a late answer may be stored unused", "error", uerr)
	}
	log.WarnContext(ctx, "delegate: no answer in time")
	return nil, fmt.Errorf("%w: question %s unanswered at %s", ErrNoAnswer, id, deadline.UTC().Format(time.RFC3339))
}

// watch returns the answer once the record holds one.
func (a *Asker) watch(ctx context.Context, key string) (*events.AskAnswer, error) {
	w, err := a.cfg.Asks.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("delegate: watch of %s ended", key)
			}
			if e == nil {
				continue // the initial values are all in
			}
			var rec events.AskRecord
			if json.Unmarshal(e.Value(), &rec) == nil && rec.State == events.AskAnswered {
				return rec.Answer, nil
			}
		}
	}
}
