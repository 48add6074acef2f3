package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/poller"
	"github.com/nats-io/nats.go/jetstream"
)

// Stages selects which stage cores a run starts.
type Stages struct {
	Poll, Dispatch, Reply bool
}

// All is every stage: the connect command.
var All = Stages{Poll: true, Dispatch: true, Reply: true}

// Run runs the selected stages long-running until ctx ends, then lets the
// dispatcher and replier finish what they hold and returns nil. The first
// stage that fails stops the others and its error is returned. With the
// poll stage and MOLECULE_PUSH_LISTEN set, Run also serves the push ingress
// (ServePush) and the poller registers the workspaces in push mode.
func (rt *Runtime) Run(ctx context.Context, s Stages) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rt.shareLedger(s)
	if s.Poll && rt.Cfg.PushListen != "" {
		urls, stop, err := rt.ServePush(ctx)
		if err != nil {
			return err
		}
		defer stop() // after the stages returned
		rt.push = urls
	}
	var wg sync.WaitGroup
	start := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				rt.Log.Error("stage stopped", "stage", name, "err", err)
				cancel(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	if s.Dispatch {
		h, err := rt.Handler()
		if err != nil {
			return err
		}
		d, err := rt.Dispatcher(h)
		if err != nil {
			return err
		}
		rt.stages.set(d, nil)
		start("dispatcher", d.Run)
	}
	if s.Reply {
		r, err := rt.Replier()
		if err != nil {
			return err
		}
		rt.stages.set(nil, r)
		start("replier", r.Run)
	}
	if s.Poll {
		p, err := rt.Poller()
		if err != nil {
			cancel(err)
		} else {
			start("poller", p.Run)
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// OnceReport is what a one-shot run did.
type OnceReport struct {
	Poll         *poller.Result `json:"poll,omitempty"`
	Handled      uint64         `json:"handled"`
	Replied      uint64         `json:"replied"`
	DeadLettered uint64         `json:"dead_lettered"`
	// Failures names each workspace or stage that did not do its work,
	// with its cause and what to do.
	Failures []Failure `json:"failures,omitempty"`
	// Errors are failures tied to no workspace or stage: a consumer that
	// could not be read, a stage that could not finish.
	Errors []string `json:"errors,omitempty"`
}

// OK is true when every workspace was polled (none unauthorized, removed,
// paused, unreachable, without poll mode or refused registration), nothing
// was dead-lettered and nothing is left queued.
func (r *OnceReport) OK() bool {
	return len(r.Errors) == 0 && len(r.Failures) == 0 && r.DeadLettered == 0
}

func (r *OnceReport) fail(f Failure) {
	r.Failures = append(r.Failures, f)
}

// Once polls every workspace once, processes everything fetched (and
// anything already queued), delivers every reply, and returns. idle is how
// long a stage waits on an empty queue before it counts as drained.
func (rt *Runtime) Once(ctx context.Context, s Stages, idle time.Duration) (*OnceReport, error) {
	rep := &OnceReport{}
	rt.shareLedger(s)
	var p *poller.Poller
	if s.Poll {
		var err error
		if p, err = rt.Poller(); err != nil {
			return nil, err
		}
		res, err := p.RunOnce(ctx)
		rep.Poll = &res
		// RunOnce fails only when ctx ended; each workspace's failure is
		// in its result and fails the run.
		for _, f := range pollFailures(&res) {
			rep.fail(f)
		}
		if err != nil && len(rep.Failures) == 0 {
			rep.Errors = append(rep.Errors, "poll: "+err.Error())
		}
	}
	if s.Dispatch {
		h, err := rt.Handler()
		if err != nil {
			return nil, err
		}
		d, err := rt.Dispatcher(h)
		if err != nil {
			return nil, err
		}
		st, err := d.Drain(ctx, idle)
		rep.Handled, rep.DeadLettered = st.Handled, rep.DeadLettered+st.DeadLettered
		if st.DeadLettered > 0 {
			rep.fail(deadLettered("dispatch", st.DeadLettered))
		}
		if err != nil {
			rep.Errors = append(rep.Errors, "dispatch: "+err.Error())
		}
	}
	if s.Reply {
		r, err := rt.Replier()
		if err != nil {
			return nil, err
		}
		st, err := r.Drain(ctx, idle)
		rep.Replied, rep.DeadLettered = st.Notified+st.SentA2A+st.Reconciled, rep.DeadLettered+st.DeadLettered
		if st.DeadLettered > 0 {
			rep.fail(deadLettered("reply", st.DeadLettered))
		}
		if err != nil {
			rep.Errors = append(rep.Errors, "reply: "+err.Error())
		}
	}
	// Whatever is still queued (a retryable failure waiting for its
	// redelivery, a message deferred for lack of time) is not done.
	for _, c := range []struct {
		on   bool
		name string
		get  func(context.Context) (uint64, error)
	}{
		{s.Dispatch, "inbound", rt.queued(rt.Topo.Dispatcher)},
		{s.Reply, "reply", rt.queued(rt.Topo.Replier)},
	} {
		if !c.on {
			continue
		}
		n, err := c.get(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		} else if n > 0 {
			rep.fail(pending(c.name, n))
		}
	}
	if s == All && rt.Cfg.Checkpoint {
		rt.checkpoint(ctx, p, rep)
	}
	return rep, nil
}

// checkpoint writes, for every workspace polled successfully, its cursor
// as a checkpoint on its feed, so a runner with an empty store resumes
// there. Only after a run that left nothing queued: every message up to
// the cursor was then answered (or dead-lettered, which fails the run).
// Otherwise the previous checkpoint stays, and a fresh runner repeats the
// replies posted since it.
func (rt *Runtime) checkpoint(ctx context.Context, p *poller.Poller, rep *OnceReport) {
	var ids []string
	for _, w := range rep.Poll.Workspaces {
		if _, _, ok := poller.Diagnose(w); ok {
			ids = append(ids, w.WorkspaceID)
		}
	}
	for _, f := range rep.Failures {
		if f.Cause == CausePending {
			rt.Log.Warn("checkpoint not advanced: messages are still queued; a runner with an empty store would start from the previous checkpoint")
			return
		}
	}
	if len(rep.Errors) > 0 || len(ids) == 0 {
		return
	}
	if err := p.WriteCheckpoints(ctx, ids); err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("checkpoint: %v; a runner with an empty store would start from the previous checkpoint (keep the store or NATS_URL, or run again)", err))
	}
}

func (rt *Runtime) queued(c jetstream.Consumer) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		if c == nil {
			return 0, nil
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("consumer info: %w", err)
		}
		return info.NumPending + uint64(info.NumAckPending), nil
	}
}
