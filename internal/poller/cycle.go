// One poll cycle of one workspace (RunOnce, FetchMore) and what it records.

package poller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// RunOnce runs one bounded unit of work: for every workspace, concurrently
// (Config.Concurrency at a time), send one heartbeat, probe the generation
// if unknown, check the state, register if never registered, fetch every
// new row (pages until a short one), run the overlap re-read when due,
// publish and advance the cursor. The heartbeat goes first, before any
// request that waits for the rate budget, once an earlier run found the
// workspace ready; on its first run it follows the registration. A request
// whose budget wait would end after ctx's deadline is not waited for: the
// workspace's cycle ends at once with ErrRateWaitPastDeadline. The error
// is non-nil only when ctx ended; per-workspace failures are in Result
// (Result.Err).
func (p *Poller) RunOnce(ctx context.Context) (Result, error) {
	res := Result{Workspaces: make([]WorkspaceResult, len(p.ws))}
	sem := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, w := range p.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				res.Workspaces[i] = WorkspaceResult{WorkspaceID: w.id, Err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			res.Workspaces[i] = p.cycle(ctx, w, cycleOpts{heartbeat: p.cfg.HeartbeatInterval > 0, checkState: true, once: true})
		}()
	}
	wg.Wait()
	return res, ctx.Err()
}

// FetchMore fetches the next batch of every workspace whose last cycle
// in prev ended with More (Config.BatchRows), without the heartbeat and
// the state read RunOnce already did; the other workspaces are left out
// of the result.
func (p *Poller) FetchMore(ctx context.Context, prev Result) (Result, error) {
	var res Result
	for _, r := range prev.Workspaces {
		if !r.More {
			continue
		}
		for _, w := range p.ws {
			if w.id == r.WorkspaceID {
				res.Workspaces = append(res.Workspaces, p.cycle(ctx, w, cycleOpts{}))
			}
		}
	}
	return res, ctx.Err()
}

type cycleOpts struct {
	heartbeat  bool // send a heartbeat in this cycle (RunOnce)
	checkState bool // read /state (else trust the last observation)
	// once: a one-shot's cycle (RunOnce), whose overlap re-read reaches
	// back behind the cursor it started from (onceSpan).
	once bool
	// quick, when positive, re-reads this recent window after the fetch
	// (a follow-up after activity; see followUps).
	quick time.Duration
	// woken: an SSE wake-up started this cycle; if its fetch publishes
	// nothing, the announced row is behind the cursor and the recent
	// window is re-read at once.
	woken bool
	// fetched, if set, is called once the feed was read, before the
	// overlap re-read and the broadcasts (startWorkspace's slot).
	fetched func()
}

// cycle is one poll of one workspace; every path records what it saw in
// the status bucket.
func (p *Poller) cycle(ctx context.Context, w *workspace, o cycleOpts) (res WorkspaceResult) {
	w.cycleMu.Lock()
	defer w.cycleMu.Unlock()
	res = WorkspaceResult{WorkspaceID: w.id, Skipped: map[string]int{}}
	rec, err := p.readStatus(ctx, w.id)
	if err != nil {
		res.Err = err
		return res
	}
	var changes statusChanges
	defer func() { p.endCycle(ctx, w, &res, changes) }()
	set := changes.set

	// A workspace known to be deleted: confirm (unauthenticated, cheap) and
	// stop without touching anything else; never register it again.
	if rec.Removed && p.stillRemoved(ctx, w, &res, set) {
		return res
	}

	// RunOnce's heartbeat (o.heartbeat) must not queue behind the requests
	// that wait for the rate budget (probe, state read, fetch): a run
	// ending at its deadline in such a wait would leave the workspace
	// without a heartbeat. So once an earlier run found the workspace ready
	// (rec.heartbeating) it goes first. Until then it follows the probe,
	// the state read and the registration, as the workspace is not ours to
	// report present before (and registering marks it online itself).
	beat := func() (end bool) { return p.cycleHeartbeat(ctx, w, &res, set) }
	beatFirst := o.heartbeat && rec.heartbeating()
	if beatFirst && beat() {
		return res
	}

	gen, stop := p.generation(ctx, w, &rec, &res, set)
	res.Generation = gen
	if stop {
		return res
	}

	if o.checkState || !w.stateKnown() {
		if p.checkState(ctx, w, &rec, &res, set) {
			return res
		}
	}
	if p.registerIfNeeded(ctx, w, &rec, &res, set) {
		return res
	}
	w.setReady()

	if o.heartbeat && !beatFirst && beat() {
		return res
	}

	if w.isPaused() {
		res.Paused = true
		return res
	}
	if w.pushURL != "" {
		return res // push mode: messages arrive through the ingress, not the feed
	}
	p.poll(ctx, w, &rec, &res, set, o)
	return res
}

// statusChanges collects what a cycle learned; endCycle writes it to the
// status bucket in one update.
type statusChanges []func(*statusRecord)

func (c *statusChanges) set(f func(*statusRecord)) { *c = append(*c, f) }

// endCycle records the cycle's outcome in the status bucket with the
// changes it collected, and logs a failure once per change (a stop was
// logged where it was decided).
func (p *Poller) endCycle(ctx context.Context, w *workspace, res *WorkspaceResult, changes statusChanges) {
	now := time.Now().UTC()
	changes.set(func(r *statusRecord) {
		r.LastPollAt = now
		r.LastPollError = ""
		if res.Err != nil {
			r.LastPollError = res.Err.Error()
			r.LastError, r.LastErrorAt = res.Err.Error(), now
		}
	})
	// Bounded: a status bucket whose leader is being elected does not
	// answer, and the workspace's next cycle waits for this one.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*stage.AttemptTimeout)
	_, err := p.updateStatus(sctx, w.id, func(r *statusRecord) {
		for _, f := range changes {
			f(r)
		}
	})
	cancel()
	p.noteStatusSave(ctx, w, err)
	if !res.Stopped && !res.Paused {
		w.recordOutcome(res.Err)
	}
	switch {
	case res.Err == nil:
		w.errs.ok(ctx, w.log, "poller: polling works again")
	case !res.Stopped && ctx.Err() == nil:
		w.errs.failed(ctx, w.log, "poller: poll failed", res.Err)
	}
}

// noteStatusSave logs a status record the bucket did not store. It is the
// cycle's bookkeeping, not its work: the rows were published and the
// cursor saved before it, so the cycle is not counted as a failed poll
// (that would log "poll failed" for a poll that worked, raise the error
// rate and fail a --once run); the next cycle's write carries the record.
func (p *Poller) noteStatusSave(ctx context.Context, w *workspace, err error) {
	switch {
	case err == nil:
		w.statusErrs.ok(ctx, w.log, "poller: status record saved again")
	case ctx.Err() == nil:
		w.statusErrs.failed(ctx, w.log, "poller: status record not saved (polling works: the rows are published and the cursor saved; the next cycle writes it)", err)
	}
}

// poll reads the feed (and, when due, the overlap window) and records how
// it went: a refused token, a platform without poll mode (stop), or the
// error.
func (p *Poller) poll(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord)), o cycleOpts) {
	ctx, span := tracing.Start(ctx, "poll", trace.SpanKindInternal, attribute.String("molecule.workspace_id", w.id))
	defer span.End()
	err := p.fetch(ctx, w, res)
	if o.fetched != nil {
		o.fetched()
	}
	switch {
	case err != nil || p.cfg.OverlapWindow <= 0:
	case time.Since(rec.LastOverlapAt) >= p.cfg.OverlapEvery && !p.overlapNeedless(w, time.Now()):
		started := time.Now()
		d, from := p.cfg.OverlapWindow, time.Time{}
		if o.once {
			d, from = p.onceSpan(w, started)
		}
		if err = p.overlapFrom(ctx, w, d, from, res); err == nil {
			w.cad.noteOverlap(started)
			now := time.Now().UTC()
			set(func(r *statusRecord) { r.LastOverlapAt = now })
		}
	case o.quick > 0 && w.c.BudgetWait(2*p.cfg.RateReserve) > 0:
		// A follow-up is a bonus: never at the expense of the polls and
		// heartbeats sharing the token's rate budget. The slow cadence
		// (or a later follow-up) covers its window.
		w.log.DebugContext(ctx, "poller: quick overlap re-read skipped; the rate budget is low")
	case o.quick > 0:
		d, from := w.rereadSpan(time.Now(), o.quick, p.cfg.OverlapWindow)
		err = p.overlapFrom(ctx, w, d, from, res)
	case o.woken && res.Published == 0 && len(p.cfg.OverlapFollowUps) > 0:
		// The event stream announces a row once it is visible (PROTOCOL
		// §8); a fetch after the cursor that does not find it means it
		// committed behind the cursor, or that the poll before already
		// read it (most of a burst's wake-ups): Run re-reads at once, or
		// with the next follow-up (followUps.owe).
		res.rereadOwed = true
	}
	if err == nil && p.broadcastDue(w, time.Now()) {
		err = p.readBroadcasts(ctx, w, rec, res, set)
	}
	w.published.save(ctx)
	switch {
	case err == nil:
	case errors.Is(err, molecule.ErrUnauthorized):
		p.unauthorized(ctx, w, err, res, set)
	case errors.Is(err, molecule.ErrOldPlatform):
		w.log.ErrorContext(ctx, "poller: the platform ignored since_id; it does not support poll mode. Refusing to poll (it would redeliver the same rows forever); use push ingress",
			"error", err)
		res.Generation, res.Stopped, res.Err = molecule.GenerationOld, true, oldPlatformError(w.id)
		now := time.Now().UTC()
		set(func(r *statusRecord) {
			r.Generation, r.ProbedAt, r.Stopped = molecule.GenerationOld.String(), now, StoppedOldPlatform
		})
	default:
		res.Err = err // logged by the deferred report
	}
}
