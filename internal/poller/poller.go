// Package poller is Molecule Relay's ingress stage: it reads each
// workspace's activity feed on the Molecule platform and publishes every
// inbound message to JetStream, losing nothing and duplicating nothing
// (docs/architecture.md, docs/protocol.md §3–§7).
//
// One unit of work is RunOnce (a Lambda invocation, a CronJob, `poll
// --once`); Run is the long-running loop around the same steps, with a
// heartbeat timer and SSE wake-ups. All state lives in JetStream: the
// cursor in events.BucketCursors (advanced with compare-and-set only after
// every publish was acknowledged) and the poller's observations in
// events.BucketPollerStatus.
package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Skip reasons: rows that are never published but that the cursor passes.
const (
	// SkipOwnNotify is the agent's own /notify output (method "notify").
	SkipOwnNotify = molecule.SkipOwnNotify
	// SkipUpload is a chat upload manifest (method "chat_upload_receive").
	SkipUpload = molecule.SkipUpload
	// SkipSelf is a message the agent sent itself, when AllowSelf is off.
	SkipSelf = molecule.SkipSelf
	// SkipOtherType is a row whose activity_type is not a2a_receive.
	SkipOtherType = "not_a2a_receive"
	// SkipBeforeSeed is a row that was already in the feed at the cold
	// start and older than BacklogWindow, met again by a window re-read.
	SkipBeforeSeed = "before_seed"
)

// Reasons a workspace stopped being polled (WorkspaceStatus.Stopped).
const (
	StoppedRemoved       = "removed"
	StoppedTokenRejected = "token_rejected"
	StoppedOldPlatform   = "old_platform"
)

// ErrTokenRejected: the platform refused the workspace token (401) while
// the workspace still exists: the token was revoked or is wrong. It also
// matches molecule.ErrUnauthorized.
var ErrTokenRejected = errors.New("poller: workspace token rejected")

const activityType = "a2a_receive"

// Poller polls the activity feeds of its workspaces into the inbound stream.
// It is safe for concurrent use; RunOnce and Run may be called repeatedly.
type Poller struct {
	js    jetstream.JetStream
	topo  *events.Topology
	cfg   Config
	log   *slog.Logger
	ws    []*workspace
	start time.Time

	// tasks is the dispatcher's ack-pending count read at tasksAt
	// (activeTasks).
	tasksMu sync.Mutex
	tasks   int
	tasksAt time.Time

	// statusCache holds, per workspace id, the status record this process
	// last read or wrote and its revision (updateStatus).
	statusCache sync.Map
	// sweptSent: this process deleted the stale published-row snapshots
	// (sentsnap.go sweepStaleSent).
	sweptSent sync.Once
	// cursorCache holds, per workspace id, the cursor this process last
	// loaded or saved, or advanced while the bucket did not answer
	// (cachedCursor).
	cursorCache sync.Map
	// clock runs every workspace's timed heartbeats and polls (sched.go).
	clock *fleetClock
	// starting holds a slot per workspace between its start and the end
	// of its first cycle (startWorkspace).
	starting chan struct{}
	// added holds, per workspace id, the clients added after New
	// (AddClient).
	added sync.Map
}

// workspace is the in-process state of one polled workspace.
type workspace struct {
	id  string
	c   *molecule.Client
	log *slog.Logger

	// cycleMu serialises poll cycles of one workspace within this process.
	cycleMu sync.Mutex
	// errs, hbErrs and statusErrs log poll, heartbeat and status record
	// failures once per change.
	errs, hbErrs, statusErrs repeatLog
	// warnedForeign: a notify row not ours was reported (foreign.go).
	warnedForeign atomic.Bool
	// warnedShared: another process on this NATS polls it too (foreign.go).
	warnedShared atomic.Bool
	// cp is the newest checkpoint on the feed, read at most once per
	// process at a cold start (cpRead), for the registration and the seed.
	cp     *Checkpoint
	cpRead bool
	// cpWritten is the cursor of the last checkpoint CheckpointAnswered
	// wrote (its goroutine only): an unchanged cursor is not written again.
	cpWritten string
	// caughtUp: the stored cursor was compared with the feed's checkpoint
	// (catchUpWithCheckpoint), once per process.
	caughtUp bool

	// sent is what this process published to the inbound stream and saw
	// acknowledged, for the overlap window (recent.go sentSet).
	sent sentSet
	// sentLoaded: the snapshot of sent was read (loadSent; cycleMu).
	sentLoaded bool
	// rereadAt is when this process's last complete overlap re-read
	// started, and rereadFloor the platform's time then, at least, less
	// followUpSlack (cycleMu): where the next quick one starts looking
	// (rereadSpan).
	rereadAt, rereadFloor time.Time
	// fetchedFrom is the created_at of the cursor the last fetch started
	// from (cycleMu): a one-shot's re-read reaches back behind it
	// (onceSpan).
	fetchedFrom time.Time
	// broadcastAsked: the event stream announced a broadcast (or a read of
	// them failed) since the last read; broadcastReadAt is when that read
	// started (cycleMu). broadcast.go.
	broadcastAsked  atomic.Bool
	broadcastReadAt time.Time
	// broadcastTexts are the whole messages the events carried.
	broadcastTexts broadcastTexts
	// busyReported: the last heartbeat sent reported this process's
	// handlers for the workspace running (startHeartbeats watches them).
	busyReported atomic.Bool
	// feedClock is the platform's clock as the last feed read saw it
	// (cycleMu; followup.go).
	feedClock feedClock
	// acks is what the feed's ack may cover (ack.go).
	acks ackState

	mu          sync.Mutex
	notBefore   time.Time // no activity request before this (429, budget)
	outcomes    []bool    // recent poll outcomes, true = failed
	sampleError string
	paused      bool
	lastStateAt time.Time
	ready       bool // generation usable and registered: heartbeats may start

	// pushURL is set for a push-mode workspace (Config.Push): registered
	// with it, never fetched. pushRegistered: this process registered it.
	pushURL        string
	pushRegistered bool

	// cad is what Run knows of the event stream and inbound activity, to
	// choose its next poll (cadence.go).
	cad cadence

	// registeringAt is when this process last asked the platform to
	// register the workspace: from then on messages queue for us, so a cold
	// start must not count them as old backlog. The status record keeps it
	// (RegisteredAt) for the next process.
	registeringAt time.Time
}

func (w *workspace) noteRegistering(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.registeringAt = t
}

func (w *workspace) registeredSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.registeringAt
}

// New returns a Poller publishing with js into topo (from
// events.EnsureTopology). It validates cfg after applying its defaults and
// makes no request.
func New(js jetstream.JetStream, topo *events.Topology, cfg Config) (*Poller, error) {
	if js == nil || topo == nil || topo.Cursors == nil || topo.Status == nil {
		return nil, fmt.Errorf("%w: a JetStream handle and a topology with cursor and status buckets are required", ErrInvalidConfig)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if dw := topo.Config.DuplicateWindow; dw > 0 && cfg.OverlapWindow >= dw {
		return nil, fmt.Errorf("%w: overlap window %s must be shorter than the inbound duplicate window %s, or re-reads publish duplicates",
			ErrInvalidConfig, cfg.OverlapWindow, dw)
	}
	if dw := topo.Config.DuplicateWindow; dw > 0 && cfg.BacklogWindow > 0 && cfg.BacklogWindow+cfg.OverlapWindow >= dw {
		cfg.Logger.Warn("poller: backlog window exceeds the inbound duplicate window; two pollers cold-starting at once may both deliver the oldest backlog",
			"backlog_window", cfg.BacklogWindow, "duplicate_window", dw)
	}
	p := &Poller{js: js, topo: topo, cfg: cfg, log: cfg.Logger, start: time.Now(), clock: newFleetClock(), starting: make(chan struct{}, startConcurrency)}
	for _, c := range cfg.Workspaces {
		p.ws = append(p.ws, &workspace{id: c.WorkspaceID(), c: c, log: cfg.Logger.With("workspace", c.WorkspaceID()),
			pushURL: cfg.Push[c.WorkspaceID()]})
	}
	return p, nil
}

// WorkspaceResult is what one poll cycle of one workspace did.
type WorkspaceResult struct {
	WorkspaceID string `json:"workspace_id"`
	// Generation is the platform generation known after the cycle.
	Generation molecule.Generation `json:"-"`
	// Registered is true when this cycle registered the workspace.
	Registered bool `json:"registered"`
	// Heartbeat is true when this cycle sent a heartbeat the platform
	// accepted.
	Heartbeat bool `json:"heartbeat"`
	// Fetched counts rows read from the feed, overlap re-reads included.
	Fetched int `json:"fetched"`
	// Published counts new messages JetStream stored; Duplicates those it
	// dropped as already published (PubAck.Duplicate).
	Published  int `json:"published"`
	Duplicates int `json:"duplicates"`
	// Skipped counts rows passed without publishing, by Skip* reason.
	Skipped map[string]int `json:"skipped,omitempty"`
	// Malformed counts rows that could not be parsed; each went to the
	// dead-letter stream and the cursor passed it.
	Malformed int `json:"malformed"`
	// Overlap is true when the overlap re-read ran.
	Overlap bool `json:"overlap"`
	// RateLimited counts 429 answers met (and waited out).
	RateLimited int `json:"rate_limited"`
	// Cursor is the activity id the cursor points at after the cycle.
	Cursor string `json:"cursor"`
	// More: the fetch stopped after a full batch (Config.BatchRows); rows
	// are left after the cursor.
	More bool `json:"more"`
	// AckedSeq is the seq this cycle acked to the platform (ack.go), 0 for
	// none.
	AckedSeq int64 `json:"acked_seq,omitempty"`
	// Paused: the workspace is paused; nothing was fetched.
	Paused bool `json:"paused"`
	// Removed: the workspace was deleted on the platform.
	Removed bool `json:"removed"`
	// Stopped: polling this workspace cannot go on (removed, token
	// rejected, OLD platform) until an operator acts; Run stops its loop.
	Stopped bool `json:"stopped"`
	// Err is the cycle's failure, nil on success.
	Err error `json:"-"`

	// published are the rows JetStream acknowledged in this cycle, for
	// the cursor's recent set.
	published []recentID
	// rereadOwed: a wake-up's poll found nothing after the cursor; Run
	// schedules a quick re-read (followUps.owe).
	rereadOwed bool
}

// MarshalJSON renders the result with snake_case keys, like every JSON the
// relay prints, Generation as "new"/"old"/"unknown" and Err as its message
// "error" (for `poll --once --json` and Lambda answers). Earlier builds
// used the Go field names (WorkspaceID, Fetched, Err); see docs/ci.md,
// "JSON", for readers of both.
func (r WorkspaceResult) MarshalJSON() ([]byte, error) {
	type plain WorkspaceResult
	out := struct {
		plain
		Generation string `json:"generation"`
		Err        string `json:"error,omitempty"`
	}{plain: plain(r), Generation: r.Generation.String()}
	if r.Err != nil {
		out.Err = r.Err.Error()
	}
	return json.Marshal(out)
}

// Result is what RunOnce did, one entry per configured workspace, in
// configuration order.
type Result struct {
	Workspaces []WorkspaceResult `json:"workspaces"`
}

// Err joins the failures of every workspace (nil if none failed), each
// prefixed with its workspace id; a CLI's --once exits non-zero on it.
func (r Result) Err() error {
	var errs []error
	for _, w := range r.Workspaces {
		if w.Err != nil {
			errs = append(errs, fmt.Errorf("workspace %s: %w", w.WorkspaceID, w.Err))
		}
	}
	return errors.Join(errs...)
}

// Published is the total of WorkspaceResult.Published.
func (r Result) Published() int {
	n := 0
	for _, w := range r.Workspaces {
		n += w.Published
	}
	return n
}

// Status reads what the poller last observed of each configured workspace,
// in configuration order (ReadStatus for the configured ids).
func (p *Poller) Status(ctx context.Context) ([]WorkspaceStatus, error) {
	ids := make([]string, len(p.ws))
	for i, w := range p.ws {
		ids[i] = w.id
	}
	return ReadStatus(ctx, p.topo, ids...)
}

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

// stillRemoved confirms that a workspace marked removed is still gone
// (true: stop), or clears the mark.
func (p *Poller) stillRemoved(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	removed, err := w.c.CheckRemoved(ctx)
	switch {
	case err != nil:
		res.Err = fmt.Errorf("poller: workspace was marked removed and the check failed: %w", err)
		return true
	case removed:
		res.Removed, res.Stopped, res.Err = true, true, removedError(w.id)
		return true
	default:
		set(func(r *statusRecord) { r.Removed, r.Stopped = false, "" })
		return false
	}
}

// cycleHeartbeat sends the cycle's heartbeat; true ends the cycle (the
// token was refused).
func (p *Poller) cycleHeartbeat(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	ok, status, herr := p.heartbeat(ctx, w)
	res.Heartbeat = ok
	if errors.Is(herr, molecule.ErrUnauthorized) {
		p.unauthorized(ctx, w, herr, res, set)
		return true
	}
	set(heartbeatSetter(status, herr))
	return false
}

// registerIfNeeded registers the workspace when it has to be: a push
// workspace its URL once per process (the URL may have changed since the
// last run); a poll workspace once ever, or again when it was last
// registered in push mode. True ends the cycle.
func (p *Poller) registerIfNeeded(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	needRegister := !rec.Registered || rec.DeliveryMode == string(molecule.DeliveryPush)
	if w.pushURL != "" {
		needRegister = !w.isPushRegistered()
	}
	if needRegister && w.pushURL == "" && !rec.Registered && p.registeredByCheckpoint(ctx, w, set) {
		needRegister = false
	}
	return !p.cfg.SkipRegister && needRegister && p.register(ctx, w, res, set)
}

// poll reads the feed (and, when due, the overlap window) and records how
// it went: a refused token, a platform without poll mode (stop), or the
// error.
func (p *Poller) poll(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord)), o cycleOpts) {
	ctx, span := tracing.Start(ctx, "poll", trace.SpanKindInternal, attribute.String("molecule.workspace_id", w.id))
	defer span.End()
	err := p.fetch(ctx, w, res)
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
	p.saveSent(ctx, w)
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

// generation returns the platform generation, probing it when unknown (or
// an OLD/inconclusive answer is older than ReprobeEvery). stop is true when
// the workspace must not be polled.
func (p *Poller) generation(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) (molecule.Generation, bool) {
	gen := rec.generation()
	if gen != molecule.GenerationNew && (rec.ProbedAt.IsZero() || time.Since(rec.ProbedAt) >= p.cfg.ReprobeEvery) {
		if err := p.pace(ctx, w); err != nil {
			res.Err = err
			return gen, true
		}
		g, err := w.c.Probe(ctx)
		if errors.Is(err, molecule.ErrUnauthorized) {
			p.unauthorized(ctx, w, err, res, set)
			return g, true
		}
		now := time.Now().UTC()
		gen = g
		set(func(r *statusRecord) { r.Generation, r.ProbedAt = g.String(), now })
		rec.Generation, rec.ProbedAt = g.String(), now
		switch g {
		case molecule.GenerationUnknown:
			w.log.WarnContext(ctx, "poller: platform generation probe inconclusive; polling anyway", "error", err)
		case molecule.GenerationNew:
			w.log.InfoContext(ctx, "poller: platform supports poll mode")
		}
	}
	if gen == molecule.GenerationOld && w.pushURL == "" { // push works on OLD
		w.log.ErrorContext(ctx, "poller: platform does not support poll mode (since_id ignored); refusing to poll this workspace. Use push ingress (register a public URL) or upgrade the platform")
		res.Stopped, res.Err = true, oldPlatformError(w.id)
		set(func(r *statusRecord) { r.Stopped = StoppedOldPlatform })
		return gen, true
	}
	set(func(r *statusRecord) {
		if r.Stopped == StoppedOldPlatform {
			r.Stopped = ""
		}
	})
	return gen, false
}

// checkState reads /state; it returns true when the cycle must end.
func (p *Poller) checkState(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	if err := p.pace(ctx, w); err != nil {
		res.Err = err
		return true
	}
	st, err := w.c.State(ctx)
	p.noteRateLimited(ctx, w, err, res)
	if errors.Is(err, molecule.ErrUnauthorized) {
		p.unauthorized(ctx, w, err, res, set)
		return true
	}
	if err != nil {
		res.Err = fmt.Errorf("poller: read workspace state: %w", err)
		return true
	}
	if st.Deleted {
		res.Removed, res.Stopped, res.Err = true, true, removedError(w.id)
		w.log.ErrorContext(ctx, "poller: workspace was deleted on the platform; regenerate the workspace and token. Polling of this workspace stops")
		set(func(r *statusRecord) { r.Removed, r.Stopped = true, StoppedRemoved })
		return true
	}
	if changed := w.setPaused(st.Paused); changed || st.Paused != rec.Paused {
		if st.Paused {
			w.log.InfoContext(ctx, "poller: workspace is paused; not fetching (heartbeats continue)")
		} else if rec.Paused {
			w.log.InfoContext(ctx, "poller: workspace resumed; fetching again")
		}
	}
	paused := st.Paused
	set(func(r *statusRecord) {
		r.Paused = paused
		if r.Stopped == StoppedTokenRejected {
			r.Stopped = ""
		}
	})
	return false
}

// register registers the workspace once; it returns true when the cycle
// must end.
func (p *Poller) register(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	card := p.cfg.AgentCard
	if card == nil && p.cfg.AgentName != "" {
		card = map[string]any{"name": p.cfg.AgentName}
	}
	if w.isPaused() {
		w.log.WarnContext(ctx, "poller: registering a paused workspace at its first start; registration un-pauses it")
	}
	req := molecule.RegisterRequest{Mode: molecule.DeliveryPoll, AgentCard: card}
	if w.pushURL != "" {
		req.Mode, req.URL = molecule.DeliveryPush, w.pushURL
	}
	asked := time.Now()
	w.noteRegistering(asked)
	rr, err := w.c.Register(ctx, req)
	if errors.Is(err, molecule.ErrUnauthorized) {
		p.unauthorized(ctx, w, err, res, set)
		return true
	}
	if err != nil {
		res.Err = fmt.Errorf("poller: register: %w", err)
		if st := molecule.StatusOf(err); st >= 400 && st < 500 && st != 429 {
			res.Err = fmt.Errorf("%w: %w", ErrRegistrationRefused, err)
		}
		return true
	}
	switch {
	case req.Mode == molecule.DeliveryPush && (rr.DeliveryMode == molecule.DeliveryPush || rr.DeliveryMode == ""):
		// An OLD platform answers no delivery mode; it only has push.
		w.log.InfoContext(ctx, "poller: registered in push mode; messages arrive through the push ingress")
	case rr.DeliveryMode != req.Mode:
		w.log.ErrorContext(ctx, "poller: the platform did not confirm the delivery mode asked for at registration; messages may not arrive",
			"asked", string(req.Mode), "delivery_mode", string(rr.DeliveryMode), "status", rr.Status)
	default:
		w.log.InfoContext(ctx, "poller: registered in poll mode")
	}
	res.Registered = true
	w.setPushRegistered()
	w.setPaused(false) // a register un-pauses the workspace
	mode := string(rr.DeliveryMode)
	if mode == "" && req.Mode == molecule.DeliveryPush {
		mode = string(req.Mode) // OLD platforms do not say
	}
	// Remember it at once: a crash later in the cycle must not cause a
	// second registration, and a run that ends before its first seed must
	// not leave the next one (a new Poller) without the registration time
	// (seed).
	if _, err := p.updateStatus(ctx, w.id, func(r *statusRecord) {
		r.Registered, r.RegisteredAt, r.DeliveryMode, r.Paused = true, asked.UTC(), mode, false
	}); err != nil {
		res.Err = err
		return true
	}
	return false
}

// unauthorized handles a 401 on a previously usable token: confirm whether
// the workspace was deleted and stop polling it either way; never register
// again in a loop.
func (p *Poller) unauthorized(ctx context.Context, w *workspace, cause error, res *WorkspaceResult, set func(func(*statusRecord))) {
	removed, err := w.c.CheckRemoved(ctx)
	switch {
	case err != nil:
		res.Err = fmt.Errorf("poller: token rejected and the removal check failed: %w", errors.Join(cause, err))
		w.log.ErrorContext(ctx, "poller: token rejected; could not check whether the workspace was removed", "error", res.Err)
	case removed:
		res.Removed, res.Stopped, res.Err = true, true, removedError(w.id)
		w.log.ErrorContext(ctx, "poller: workspace was deleted on the platform; regenerate the workspace and token. Polling of this workspace stops")
		set(func(r *statusRecord) { r.Removed, r.Stopped = true, StoppedRemoved })
	default:
		res.Stopped = true
		res.Err = fmt.Errorf("%w (%w): workspace %s exists but its token was refused (revoked or wrong); configure a valid token: %w",
			ErrTokenRejected, molecule.ErrUnauthorized, w.id, cause)
		w.log.ErrorContext(ctx, "poller: workspace token rejected (revoked or invalid) although the workspace exists; configure a new token. Polling of this workspace stops")
		set(func(r *statusRecord) { r.Stopped = StoppedTokenRejected })
	}
}

func removedError(ws string) error {
	return fmt.Errorf("poller: workspace %s was deleted on the platform; regenerate the workspace and token: %w", ws, molecule.ErrWorkspaceRemoved)
}

func oldPlatformError(ws string) error {
	return fmt.Errorf("poller: workspace %s: platform does not support poll mode (since_id ignored); use push ingress or upgrade the platform: %w",
		ws, molecule.ErrOldPlatform)
}

// heartbeat sends the full heartbeat body. Heartbeats never wait for the
// rate budget: the budget reserve exists for them.
func (p *Poller) heartbeat(ctx context.Context, w *workspace) (ok bool, status string, err error) {
	rate, sample := w.errorRate()
	active, current, known := p.tasksOf(ctx, w)
	w.busyReported.Store(known && active > 0)
	hb := molecule.Heartbeat{
		ActiveTasks:        active,
		CurrentTask:        current,
		UptimeSeconds:      int64(time.Since(p.start).Seconds()),
		ErrorRate:          rate,
		SampleError:        sample,
		Capabilities:       p.cfg.Capabilities,
		IdleTimeoutSeconds: p.cfg.IdleTimeoutSeconds,
		InstanceID:         p.cfg.InstanceID,
	}
	r, err := w.c.Heartbeat(ctx, hb)
	if err != nil {
		if ctx.Err() == nil {
			w.hbErrs.failed(ctx, w.log, "poller: heartbeat failed; without heartbeats the workspace goes offline", err)
		}
		return false, "", err
	}
	w.hbErrs.ok(ctx, w.log, "poller: heartbeats work again")
	return true, r.Status, nil
}

func heartbeatSetter(status string, err error) func(*statusRecord) {
	now := time.Now().UTC()
	return func(r *statusRecord) {
		r.LastHeartbeatAt = now
		r.HeartbeatStatus, r.HeartbeatError = status, ""
		if err != nil {
			r.HeartbeatStatus, r.HeartbeatError = "", err.Error()
		}
	}
}

// tasksOf is what the heartbeat says w is doing: this process's handlers
// for it (Config.Tasks), else the relay's load (activeTasks).
func (p *Poller) tasksOf(ctx context.Context, w *workspace) (n int, current string, known bool) {
	if p.cfg.Tasks != nil {
		if n, current, known = p.cfg.Tasks.Running(w.id); known {
			return n, current, true
		}
	}
	return p.activeTasks(ctx), "", false
}

// activeTasks is the dispatcher consumer's ack-pending count: messages
// handed to a handler and not finished. The consumer is shared by every
// workspace, so it is the relay's load, not this workspace's alone.
//
// The answer is shared by every workspace's heartbeat for
// activeTasksFresh: a fleet of a thousand workspaces would otherwise ask
// the JetStream API 33 times a second for the same number.
func (p *Poller) activeTasks(ctx context.Context) int {
	if p.topo.Dispatcher == nil {
		return 0
	}
	p.tasksMu.Lock()
	defer p.tasksMu.Unlock()
	if !p.tasksAt.IsZero() && time.Since(p.tasksAt) < activeTasksFresh {
		return p.tasks
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := p.topo.Dispatcher.Info(ictx)
	if err != nil {
		info = p.topo.Dispatcher.CachedInfo()
	}
	p.tasks, p.tasksAt = 0, time.Now()
	if info != nil {
		p.tasks = info.NumAckPending
	}
	return p.tasks
}

// activeTasksFresh is how long one reading of the dispatcher's ack-pending
// count serves every heartbeat.
const activeTasksFresh = 5 * time.Second

const outcomeWindow = 20

func (w *workspace) recordOutcome(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outcomes = append(w.outcomes, err != nil)
	if len(w.outcomes) > outcomeWindow {
		w.outcomes = w.outcomes[len(w.outcomes)-outcomeWindow:]
	}
	if err != nil {
		w.sampleError = truncate(err.Error(), 200)
	}
}

// errorRate is the share of failed polls among the recent ones, and the
// last failure's message when any recent poll failed.
func (w *workspace) errorRate() (float64, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.outcomes) == 0 {
		return 0, ""
	}
	failed := 0
	for _, f := range w.outcomes {
		if f {
			failed++
		}
	}
	if failed == 0 {
		return 0, ""
	}
	return float64(failed) / float64(len(w.outcomes)), w.sampleError
}

func (w *workspace) setPaused(v bool) (changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed = w.paused != v || w.lastStateAt.IsZero()
	w.paused, w.lastStateAt = v, time.Now()
	return changed
}

func (w *workspace) isPaused() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.paused
}

func (w *workspace) stateKnown() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.lastStateAt.IsZero()
}

func (w *workspace) stateAge() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastStateAt.IsZero() {
		return time.Duration(1<<63 - 1)
	}
	return time.Since(w.lastStateAt)
}

func (w *workspace) getNotBefore() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notBefore
}

func (w *workspace) setNotBefore(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.notBefore) {
		w.notBefore = t
	}
}

func (w *workspace) setReady() {
	w.mu.Lock()
	w.ready = true
	w.mu.Unlock()
}

func (w *workspace) setPushRegistered() {
	w.mu.Lock()
	w.pushRegistered = true
	w.mu.Unlock()
}

func (w *workspace) isPushRegistered() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pushRegistered
}

func (w *workspace) isReady() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
