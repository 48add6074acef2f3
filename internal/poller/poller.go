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
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

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
	// sweptSnapshots: this process deleted the stale published-row
	// snapshots (sweepStaleOnce).
	sweptSnapshots sync.Once
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
		p.ws = append(p.ws, p.newWorkspace(c))
	}
	return p, nil
}
