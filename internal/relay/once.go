package relay

import (
	"context"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
)

// CheckpointBatch is how many feed rows per workspace a checkpointed
// one-shot run (connect --once with MOLECULE_CHECKPOINT) fetches, answers
// and checkpoints at a time: a run that crashes repeats at most this many
// replies per workspace on a runner with an empty store.
const CheckpointBatch = 20

// onceRun holds the dispatcher and replier of a one-shot run.
type onceRun struct {
	rt                      *Runtime
	s                       Stages
	d                       *dispatcher.Dispatcher
	r                       *replier.Replier
	deadDispatch, deadReply uint64
}

func (rt *Runtime) onceStages(s Stages) (*onceRun, error) {
	d, r, err := rt.stageCores(s)
	if err != nil {
		return nil, err
	}
	return &onceRun{rt: rt, s: s, d: d, r: r}, nil
}

// drain runs the dispatcher, then the replier, until its queue is empty
// (nothing else adds to them: the poller published the whole batch before
// the drains began, and the replier starts after the dispatcher's last
// reply), and returns what is still queued. idle bounds only the wait
// for a message still queued but not delivered yet (a retry waiting for
// its redelivery): an empty queue is done at once.
func (o *onceRun) drain(ctx context.Context, rep *OnceReport, idle time.Duration) []Failure {
	// The replies the dispatcher posted itself (direct posting) are the
	// replier's, counted while the dispatcher drains.
	var repliedBefore uint64
	if o.r != nil {
		repliedBefore = replied(o.r.Stats())
	}
	if o.d != nil {
		st, err := o.d.DrainUntilEmpty(ctx, idle)
		rep.Handled += st.Handled
		rep.DeadLettered += st.DeadLettered
		o.deadDispatch += st.DeadLettered
		if err != nil {
			rep.Errors = append(rep.Errors, "dispatch: "+err.Error())
		}
	}
	if o.r != nil {
		st, err := o.r.DrainUntilEmpty(ctx, idle)
		rep.Replied += replied(o.r.Stats()) - repliedBefore
		rep.DeadLettered += st.DeadLettered
		o.deadReply += st.DeadLettered
		if err != nil {
			rep.Errors = append(rep.Errors, "reply: "+err.Error())
		}
	}
	// Whatever is still queued (a retryable failure waiting for its
	// redelivery, a message deferred for lack of time) is not done.
	var pend []Failure
	for _, c := range []struct {
		on   bool
		name string
		get  func(context.Context) (uint64, error)
	}{
		{o.s.Dispatch, "inbound", o.rt.queued(o.rt.Topo.Dispatcher)},
		{o.s.Reply, "reply", o.rt.queued(o.rt.Topo.Replier)},
	} {
		if !c.on {
			continue
		}
		n, err := c.get(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		} else if n > 0 {
			pend = append(pend, pending(c.name, n))
		}
	}
	return pend
}

func anyMore(r poller.Result) bool {
	for _, w := range r.Workspaces {
		if w.More {
			return true
		}
	}
	return false
}

// mergePoll adds a batch's counts to the run's poll result; a batch's
// failure replaces the workspace's (it happened later).
func mergePoll(into *poller.Result, batch poller.Result) {
	for _, b := range batch.Workspaces {
		for i := range into.Workspaces {
			w := &into.Workspaces[i]
			if w.WorkspaceID != b.WorkspaceID {
				continue
			}
			w.Fetched += b.Fetched
			w.Published += b.Published
			w.Duplicates += b.Duplicates
			w.Malformed += b.Malformed
			w.RateLimited += b.RateLimited
			for k, v := range b.Skipped {
				if w.Skipped == nil {
					w.Skipped = map[string]int{}
				}
				w.Skipped[k] += v
			}
			w.Cursor, w.More = b.Cursor, b.More
			if b.Err != nil {
				w.Err, w.Stopped, w.Removed = b.Err, b.Stopped, b.Removed
			}
		}
	}
}

// replied is how many replies s counts as delivered.
func replied(s replier.Stats) uint64 { return s.Notified + s.SentA2A + s.Reconciled }
