package relay

import (
	"context"
	"fmt"
	"time"

	relayrt "github.com/molecule-ai/molecule-relay/internal/relay"
)

// Report is what a one-shot run (Relay.Once) did.
type Report struct {
	// Polled is each workspace polled, in order.
	Polled                         []Polled
	Handled, Replied, DeadLettered uint64
	// Failures names each workspace or stage that did not do its work,
	// with its cause and what to do, and each error tied to neither (a
	// consumer that could not be read).
	Failures []string
}

// Polled is what a one-shot run read from one workspace's feed.
type Polled struct {
	WorkspaceID                    string
	Fetched, Published, Duplicates int
}

// OK is true when every workspace was polled, nothing was dead-lettered
// and nothing is left queued.
func (r *Report) OK() bool { return len(r.Failures) == 0 && r.DeadLettered == 0 }

// ErrIncomplete is returned by Once, with its report, when a workspace
// could not be polled, a message was dead-lettered or one is left queued.
var ErrIncomplete = relayrt.ErrSomethingFailed

// Once does one bounded run, as `connect --once`: it polls every
// workspace once, handles everything fetched (and anything already
// queued), posts every answer and returns. idle is how long an empty
// queue must stay empty to count as drained (0: a second). With
// MOLECULE_CHECKPOINT it works in checkpointed batches, for a runner
// with an empty store (CI).
func (r *Relay) Once(ctx context.Context, idle time.Duration) (*Report, error) {
	if r.stages.Poll && r.rt.Cfg.PushListen != "" {
		return nil, fmt.Errorf("%w: MOLECULE_PUSH_LISTEN: push mode needs a long-running relay (Run), not Once", ErrInvalidConfig)
	}
	if idle <= 0 {
		idle = time.Second
	}
	stop, err := r.rt.ServeMetrics(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	in, err := r.rt.Once(ctx, r.stages, idle)
	if err != nil {
		return nil, err
	}
	rep := &Report{Handled: in.Handled, Replied: in.Replied, DeadLettered: in.DeadLettered, Failures: in.Errors}
	if in.Poll != nil {
		for _, w := range in.Poll.Workspaces {
			rep.Polled = append(rep.Polled, Polled{WorkspaceID: w.WorkspaceID, Fetched: w.Fetched, Published: w.Published, Duplicates: w.Duplicates})
		}
	}
	for _, f := range in.Failures {
		rep.Failures = append(rep.Failures, f.String())
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w: %d failure(s), %d dead-lettered (see the report)", ErrIncomplete, len(rep.Failures), rep.DeadLettered)
	}
	return rep, nil
}
