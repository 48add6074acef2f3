package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Run polls every workspace until ctx ends: per workspace a loop that polls
// every PollInterval (the source of truth; after a failed cycle sooner, 250
// ms doubling up to the interval) and, with Config.SSE, at once
// when the workspace's event stream announces an inbound message; and a
// heartbeat every HeartbeatInterval that never waits for the rate budget.
// A workspace that cannot be polled any more (deleted, token rejected, OLD
// platform; a push workspace, Config.Push, is not stopped by OLD) is
// stopped with an error log while the others go on. Run
// returns when ctx ends or every workspace has stopped; the error joins the
// reasons workspaces stopped (nil when ctx ended and none stopped).
func (p *Poller) Run(ctx context.Context) error {
	errs := make([]error, len(p.ws))
	var wg sync.WaitGroup
	for i, w := range p.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.runWorkspace(ctx, w); err != nil {
				errs[i] = fmt.Errorf("workspace %s: %w", w.id, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *Poller) runWorkspace(ctx context.Context, w *workspace) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel() // runs before bg.Wait

	wake := make(chan struct{}, 1)
	if p.cfg.SSE && w.pushURL == "" { // a push workspace is never fetched: no wake-ups
		bg.Add(1)
		go func() { defer bg.Done(); p.sseLoop(ctx, w, wake) }()
	}
	ticker := time.NewTicker(p.cfg.PollInterval)
	defer ticker.Stop()
	// Quick overlap re-reads after activity (Config.OverlapFollowUps).
	var fu followUps
	fuTimer := time.NewTimer(time.Hour)
	fuTimer.Stop()
	defer fuTimer.Stop()
	heartbeating, woken := false, false
	var retry failRetry // a failed cycle is tried again sooner (retry.go)
	for {
		// State is read at most once per poll interval: an SSE wake-up goes
		// straight to the fetch.
		o := cycleOpts{checkState: w.stateAge() >= p.cfg.PollInterval, woken: woken, quick: fu.take(time.Now())}
		res := p.cycle(ctx, w, o)
		if res.Published > 0 {
			fu.schedule(time.Now(), p.cfg.OverlapFollowUps)
			if p.cfg.OnPublished != nil {
				p.cfg.OnPublished(res.Published)
			}
		}
		// A stop is reported even when ctx ended meanwhile: the status
		// already says so, and the caller must learn why.
		if res.Stopped {
			w.log.Error("poller: stopped polling this workspace", "error", res.Err)
			return res.Err
		}
		if ctx.Err() != nil {
			return nil
		}
		if p.cfg.RefuseSecondRelay && w.warnedForeign.Load() {
			w.log.Error("poller: stopped polling this workspace: another relay answers it (MOLECULE_SINGLETON=refuse)")
			return ErrSecondRelay
		}
		if !heartbeating && w.isReady() {
			heartbeating = true
			bg.Add(1)
			go func() { defer bg.Done(); p.heartbeatLoop(ctx, w) }()
		}
		var fuC <-chan time.Time
		if due, ok := fu.next(); ok {
			fuTimer.Reset(time.Until(due))
			fuC = fuTimer.C
		}
		var retryC <-chan time.Time
		if d, ok := retry.after(res.Err, p.cfg.PollInterval); ok {
			retryC = time.After(d)
		}
		woken = false
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-wake:
			woken = true
		case <-fuC:
		case <-retryC:
		}
		fuTimer.Stop()
	}
}

// heartbeatLoop sends a heartbeat now and then every HeartbeatInterval.
func (p *Poller) heartbeatLoop(ctx context.Context, w *workspace) {
	t := time.NewTicker(p.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		_, status, err := p.heartbeat(ctx, w)
		if ctx.Err() != nil {
			return
		}
		// A 401 here is left to the poll loop: after a delete the platform
		// still answers heartbeats 200, and state/activity decide.
		if _, serr := p.updateStatus(ctx, w.id, heartbeatSetter(status, err)); serr != nil && ctx.Err() == nil {
			w.log.Warn("poller: could not record the heartbeat", "error", serr)
		}
		// A refused heartbeat is sent again after the platform's
		// Retry-After rather than a whole interval later: a workspace
		// without heartbeats goes offline.
		next := t.C
		if errors.Is(err, molecule.ErrRateLimited) {
			d := molecule.RetryAfterOf(err)
			if d <= 0 {
				d = defaultRetryAfter
			}
			if d < p.cfg.HeartbeatInterval {
				w.log.Warn("poller: heartbeat rate-limited; sending it again after the platform's Retry-After", "retry_after", d)
				next = time.After(d)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-next:
		}
	}
}

// activityEvent is the part of an ACTIVITY_LOGGED event's data we read.
type activityEvent struct {
	ActivityType string `json:"activity_type"`
	Method       string `json:"method"`
}

// wakeOn reports whether an SSE event announces a row worth polling for now.
func wakeOn(ev molecule.Event) bool {
	if ev.Type != "ACTIVITY_LOGGED" {
		return false
	}
	var d activityEvent
	if json.Unmarshal(ev.Data, &d) != nil {
		return false
	}
	return d.ActivityType == activityType && d.Method != "notify" && d.Method != "chat_upload_receive"
}

// sseLoop holds the workspace's event stream and wakes the poll loop on an
// inbound ACTIVITY_LOGGED (bursts coalesce in the one-slot channel). It
// reconnects with exponential backoff; each connect costs one request of
// the rate budget, so it paces like a fetch.
func (p *Poller) sseLoop(ctx context.Context, w *workspace, wake chan<- struct{}) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 250 * time.Millisecond
	eb.MaxInterval = 30 * time.Second
	eb.MaxElapsedTime = 0 // until ctx ends
	b := backoff.WithContext(eb, ctx)
	for {
		if err := p.pace(ctx, w); err != nil {
			return
		}
		connected := time.Now()
		err := w.c.StreamEvents(ctx, func(ev molecule.Event) {
			// A wake-up already pending covers this event: skip its parse.
			if len(wake) == cap(wake) {
				return
			}
			if wakeOn(ev) {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		// A connection that lived a while was healthy: start over.
		if time.Since(connected) > time.Minute {
			b.Reset()
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return
		}
		w.log.Debug("poller: event stream ended; reconnecting", "error", err, "wait", d)
		// Polls continue on the timer meanwhile; poll once now in case the
		// stream missed an event.
		select {
		case wake <- struct{}{}:
		default:
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
