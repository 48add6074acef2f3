// The in-process state of one polled workspace.

package poller

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

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
	// cursorMoves counts saveCursor's calls for this workspace; cpMoves is
	// its value when CheckpointAnswered last looked at the cursor
	// (cpLooked), which skips reading a cursor this process has not moved
	// since (its goroutine only).
	cursorMoves atomic.Uint64
	cpMoves     uint64
	cpLooked    bool
	// caughtUp: the stored cursor was compared with the feed's checkpoint
	// (catchUpWithCheckpoint), once per process.
	caughtUp bool
	// cursorRead: a fetch in this process read the stored cursor; then
	// unconfirmed is the revision of the copy the current fetch started
	// from without reading it, 0 once read (cycleMu; fetchCursor).
	cursorRead  bool
	unconfirmed uint64

	// published is what this process published recently (published.go).
	published *published
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

// newWorkspace returns the in-process state of c's workspace, as a start
// finds it: nothing remembered yet.
func (p *Poller) newWorkspace(c *molecule.Client) *workspace {
	id := c.WorkspaceID()
	log := p.log.With("workspace", id)
	return &workspace{id: id, c: c, log: log, pushURL: p.cfg.Push[id], published: newPublished(p.topo.Status, id, p.recentKeep(), log)}
}
