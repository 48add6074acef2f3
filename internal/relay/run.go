package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Stages selects which stage cores a run starts.
type Stages struct {
	Poll, Dispatch, Reply bool
	// ReplyDrain, with Reply and without Dispatch, is for a caller that
	// runs its own dispatcher and stops it before ctx ends (mcp, whose
	// dispatcher lives while Claude is connected): at the stop the replier
	// posts what the reply queue holds, as after this run's own
	// dispatcher, counting it drained once it stayed empty this long. An
	// empty queue is seen at once, without that wait. 0: no drain.
	ReplyDrain time.Duration
}

// All is every stage: the connect command.
var All = Stages{Poll: true, Dispatch: true, Reply: true}

// Run runs the selected stages long-running until ctx ends, then stops
// gracefully inside Cfg.StopGrace (see stopper): no new work is taken,
// the handlers in flight finish, and, when this run dispatches, the
// replier posts their replies before Run returns nil. Run returns by the
// end of the grace even when a stage has not (a handler that ignores its
// context): that work is left to the next start, and the log says so.
// The first stage that fails stops the others and its error is returned.
// With the poll stage and MOLECULE_PUSH_LISTEN set, Run also serves the
// push ingress (ServePush) and the poller registers the workspaces in
// push mode.
func (rt *Runtime) Run(ctx context.Context, s Stages) error {
	st := rt.newStopper(ctx)
	defer st.close()
	defer rt.shareLedger(s)()
	if s.Poll && rt.Cfg.PushListen != "" {
		urls, stop, err := rt.ServePush(st.take)
		if err != nil {
			return err
		}
		defer stop() // after the stages returned
		rt.push = urls
	}
	d, r, err := rt.stageCores(s)
	if err != nil {
		return err
	}
	rt.stages.set(d, r)
	st.drain = d != nil || s.ReplyDrain > 0
	st.watch(d, r)
	if d != nil {
		st.start("dispatcher", func() error {
			err := d.Run(st.take)
			st.dispatched()
			return err
		})
	}
	if r != nil {
		st.start("replier", func() error {
			if err := r.Run(st.reply); err != nil {
				return err
			}
			switch {
			case st.failed():
				return nil
			case d != nil:
				// This process's handlers are done: post their replies.
				return st.drainReplies(r, stopDrainIdle)
			case s.ReplyDrain > 0:
				// The caller's dispatcher stopped before ctx ended.
				return st.drainQueued(r, s.ReplyDrain)
			}
			return nil
		})
	}
	var checkpointed *poller.Poller
	if s.Poll {
		p, err := rt.Poller()
		if err != nil {
			st.fail(err)
		} else {
			st.start("poller", func() error { return rt.runPoller(st.take, p) })
			if rt.checkpoints(s) {
				checkpointed = p
				st.start("checkpoint", func() error { rt.checkpointEvery(st.take, p); return nil })
			}
		}
	}
	err = st.wait()
	if checkpointed != nil {
		// A clean stop answered what it took: the next start, on any
		// store, resumes here.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCheckpointTimeout)
		defer cancel()
		rt.writeCheckpoint(ctx, checkpointed)
	}
	return err
}

// finalCheckpointTimeout bounds the checkpoint a clean stop writes after
// the stages ended: one row and its read-back per workspace.
const finalCheckpointTimeout = 5 * time.Second

// checkpoints reports whether a long-running run writes checkpoints: only
// when it runs every stage (so its own queues say what was answered) and
// polls every workspace itself (in a poller group, the members' cursors
// move under each other).
func (rt *Runtime) checkpoints(s Stages) bool {
	return s.Poll && s.Dispatch && s.Reply && rt.Cfg.Checkpoint && rt.Cfg.PollerGroup == "" && rt.Cfg.CheckpointEvery.D() > 0
}

// checkpointEvery writes checkpoints every MOLECULE_CHECKPOINT_EVERY
// until ctx ends: the feed, not the store, is then the record of what was
// answered (issue 37).
func (rt *Runtime) checkpointEvery(ctx context.Context, p *poller.Poller) {
	t := time.NewTicker(rt.Cfg.CheckpointEvery.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rt.writeCheckpoint(ctx, p)
		}
	}
}

// writeCheckpoint writes a checkpoint of every moved cursor if the
// dispatcher's and the replier's queues are empty; a busy relay tries
// again at the next tick.
func (rt *Runtime) writeCheckpoint(ctx context.Context, p *poller.Poller) {
	done, err := p.CheckpointAnswered(ctx, rt.answered)
	switch {
	case err != nil && ctx.Err() == nil:
		rt.Log.Warn("checkpoint not written; the previous one on the feed stays", "error", err)
	case !done:
		rt.Log.Debug("checkpoint not written: messages are in flight; trying again at the next interval")
	}
}

// answered reports whether everything published to the inbound and reply
// streams was answered or dead-lettered: nothing pending, nothing unacked.
func (rt *Runtime) answered(ctx context.Context) (bool, error) {
	for _, c := range []jetstream.Consumer{rt.Topo.Dispatcher, rt.Topo.Replier} {
		n, err := rt.queued(c)(ctx)
		if err != nil || n > 0 {
			return false, err
		}
	}
	return true, nil
}

// runPoller polls every workspace, or, with MOLECULE_POLLER_GROUP, those
// the group assigns to this process (internal/pollgroup).
func (rt *Runtime) runPoller(ctx context.Context, p *poller.Poller) error {
	if rt.Cfg.PollerGroup == "" && rt.reg != nil {
		return rt.reg.follow(ctx, p)
	}
	if rt.Cfg.PollerGroup == "" {
		return p.Run(ctx)
	}
	ids := make([]string, len(rt.Clients))
	for i, c := range rt.Clients {
		ids[i] = c.WorkspaceID()
	}
	poll := p.PollWorkspace
	var src pollgroup.Source
	if rt.reg != nil {
		src = rt.reg.reg
		poll = func(ctx context.Context, id string) error { return rt.reg.pollReplacing(ctx, p, id) }
	}
	return pollgroup.Run(ctx, rt.Conn.JS, pollgroup.Config{
		Group:      rt.Cfg.PollerGroup,
		Instance:   rt.InstanceID(),
		Workspaces: ids,
		Source:     src,
		Poll:       poll,
		Replicas:   rt.Cfg.Replicas,
		Logger:     rt.Log.With("stage", events.StagePoller),
	})
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
// anything already queued), delivers every reply, and returns. An empty
// queue counts as drained at once; idle is how long a stage waits for a
// message still queued but not delivered (a retry waiting for its
// redelivery) before the run reports it pending.
//
// With every stage and checkpoints on (connect --once, MOLECULE_CHECKPOINT)
// it works in batches of at most CheckpointBatch rows per workspace:
// fetch, answer, checkpoint, fetch the next batch. A run that crashes then
// repeats, on a runner with an empty store, at most one batch of replies
// per workspace.
func (rt *Runtime) Once(ctx context.Context, s Stages, idle time.Duration) (*OnceReport, error) {
	rep := &OnceReport{}
	defer rt.shareLedger(s)()
	batched := s == All && rt.Cfg.Checkpoint
	var (
		p   *poller.Poller
		res poller.Result
		err error
	)
	if s.Poll {
		if p, err = rt.poller(batched); err != nil {
			return nil, err
		}
		var perr error
		res, perr = p.RunOnce(ctx)
		rep.Poll = &res
		if perr != nil && res.Err() == nil {
			rep.Errors = append(rep.Errors, "poll: "+perr.Error())
		}
	}
	o, err := rt.onceStages(s)
	if err != nil {
		return nil, err
	}
	for round := 1; ; round++ {
		more := batched && anyMore(res)
		pend := o.drain(ctx, rep, idle)
		if len(pend) == 0 && batched && len(rep.Errors) == 0 {
			rt.checkpoint(ctx, p, res, rep)
		}
		if len(pend) > 0 || !more || len(rep.Errors) > 0 || ctx.Err() != nil {
			if len(pend) > 0 && batched {
				rt.Log.Warn("checkpoint not advanced: messages are still queued; a runner with an empty store starts from the previous checkpoint")
			}
			for _, f := range pend {
				rep.fail(f)
			}
			break
		}
		next, _ := p.FetchMore(ctx, res)
		mergePoll(rep.Poll, next)
		res = next
		rt.Log.Debug("one-shot: next batch", "round", round+1)
	}
	if rep.Poll != nil {
		// RunOnce fails only when ctx ended; each workspace's failure is
		// in its result and fails the run.
		for _, f := range pollFailures(rep.Poll) {
			rep.fail(f)
		}
	}
	for _, x := range []struct {
		stage string
		n     uint64
	}{{"dispatch", o.deadDispatch}, {"reply", o.deadReply}} {
		if x.n > 0 {
			rep.fail(deadLettered(x.stage, x.n))
		}
	}
	return rep, nil
}

// checkpoint writes, for every workspace of the last batch that was
// polled successfully, its cursor as a checkpoint on its feed, so a runner
// with an empty store resumes there. Called only when nothing is left
// queued: every message up to the cursor was answered (or dead-lettered,
// which fails the run). Otherwise the previous checkpoint stays.
func (rt *Runtime) checkpoint(ctx context.Context, p *poller.Poller, res poller.Result, rep *OnceReport) {
	var ids []string
	for _, w := range res.Workspaces {
		if _, _, ok := poller.Diagnose(w); ok {
			ids = append(ids, w.WorkspaceID)
		}
	}
	if len(ids) == 0 {
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
