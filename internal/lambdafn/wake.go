package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/lambdainvoke"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/replier"
)

// Settings of the wake-ups between the functions (issue 10). The AWS
// endpoint, region and credentials come from the standard variables
// (lambdainvoke.FromEnv).
type wakeSettings struct {
	// DispatcherFunction is the function a poller wakes when it stored
	// messages (a name, a partial ARN or an ARN). If not set, none: the
	// dispatcher's schedule alone.
	DispatcherFunction string `env:"MOLECULE_DISPATCHER_FUNCTION"`
	// ReplierFunction is the function a dispatcher wakes when it published
	// replies. If not set, none: the replier's schedule alone.
	ReplierFunction string `env:"MOLECULE_REPLIER_FUNCTION"`
	// WakeInterval is the least time between two rounds of wake-ups of one
	// function from one execution environment. Default 1s.
	WakeInterval config.Seconds `env:"MOLECULE_WAKE_INTERVAL" envDefault:"1s"`
	// Fanout is the most dispatcher invocations that run at once: a
	// dispatcher invocation starts more of its own function (its
	// AWS_LAMBDA_FUNCTION_NAME) while the backlog needs them, and one more
	// when it ends at its deadline with messages left. If not set (0), a
	// dispatcher never invokes itself and work left waits for a wake-up or
	// the schedule. The template sets it to the dispatcher's reserved
	// concurrency.
	Fanout int `env:"MOLECULE_DISPATCHER_FANOUT" envDefault:"0"`
}

// wakers are a function's wake-ups of other functions; nil ones are off.
type wakers struct {
	dispatcher *lambdainvoke.Waker // poller → dispatcher
	replier    *lambdainvoke.Waker // dispatcher → replier
	self       *lambdainvoke.Waker // dispatcher → more dispatchers
	fanout     int
	log        *slog.Logger
	reported   int // sent counts already reported by flush
}

// newWakers builds the wake-ups stage sends, from the environment m.
func newWakers(stage Stage, s wakeSettings, m map[string]string, log *slog.Logger) (wakers, error) {
	w := wakers{fanout: s.Fanout, log: log}
	if s.Fanout < 0 {
		return w, fmt.Errorf("MOLECULE_DISPATCHER_FANOUT: %d; want 0 (no self-invocation) or more", s.Fanout)
	}
	if s.WakeInterval.D() <= 0 {
		return w, errors.New("MOLECULE_WAKE_INTERVAL: must be positive")
	}
	targets := map[**lambdainvoke.Waker]string{}
	switch stage {
	case Poller:
		targets[&w.dispatcher] = s.DispatcherFunction
	case Dispatcher:
		targets[&w.replier] = s.ReplierFunction
		if s.Fanout > 0 {
			self := s.DispatcherFunction
			if self == "" {
				self = m["AWS_LAMBDA_FUNCTION_NAME"]
			}
			if self == "" {
				return w, errors.New("MOLECULE_DISPATCHER_FANOUT needs the dispatcher's own name: AWS_LAMBDA_FUNCTION_NAME (set by Lambda) or MOLECULE_DISPATCHER_FUNCTION")
			}
			targets[&w.self] = self
		}
	}
	var client *lambdainvoke.Client
	for dst, fn := range targets {
		if fn == "" {
			continue
		}
		if client == nil {
			c, err := lambdainvoke.FromEnv(func(k string) string { return m[k] })
			if err != nil {
				return w, fmt.Errorf("waking %s: %w", fn, err)
			}
			client = c
		}
		*dst = lambdainvoke.NewWaker(client, fn, s.WakeInterval.D(), log)
	}
	return w, nil
}

// hooks are the stage cores' callbacks that trigger the wake-ups.
func (w *wakers) hooks() relay.Hooks {
	var h relay.Hooks
	if r := w.replier; r != nil {
		h.OnReply = func() { r.Wake(1) }
	}
	return h
}

// published wakes the dispatcher after the poller stored n messages; the
// dispatcher fans out by the backlog itself (fanOut).
func (w *wakers) published(n int) {
	if w.dispatcher != nil && n > 0 {
		w.dispatcher.Wake(1)
	}
}

// flush sends what is outstanding before the invocation returns (a frozen
// environment would hold it) and returns how many invocations were sent
// since the last flush. It leaves 200 ms of ctx's deadline to answer.
func (w *wakers) flush(ctx context.Context) int {
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-200*time.Millisecond))
		defer cancel()
	}
	total := 0
	for _, k := range []*lambdainvoke.Waker{w.dispatcher, w.replier, w.self} {
		if k == nil {
			continue
		}
		k.Flush(ctx)
		sent, _ := k.Counts()
		total += sent
	}
	n := total - w.reported
	w.reported = total
	return n
}

// fanOut starts more dispatcher invocations when the backlog needs them:
// as many as the undelivered and unacknowledged messages fill at
// MOLECULE_CONCURRENCY each, at most MOLECULE_DISPATCHER_FANOUT, less those
// already at work (estimated from the messages they hold unacknowledged,
// this one counted). Extra invocations beyond the reserved concurrency are
// throttled by Lambda and retried from its asynchronous queue, where they
// find an empty queue and end after MOLECULE_DRAIN_IDLE.
func (f *Function) fanOut(ctx context.Context) {
	f.startMore(ctx, "fan-out", 1)
}

// handOver runs when a drain ended: if messages are still undelivered (the
// drain ran out of time for another handler), the next invocations start
// now rather than at the next wake-up or schedule (this one no longer
// counts as running). After an idle drain it finds nothing to do.
func (f *Function) handOver(ctx context.Context) {
	f.startMore(ctx, "hand-over", 0)
}

func (f *Function) startMore(ctx context.Context, why string, self int) {
	if f.wakers.self == nil || f.rt == nil || f.rt.Topo.Dispatcher == nil {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := f.rt.Topo.Dispatcher.Info(ictx)
	if err != nil {
		f.log.WarnContext(ctx, why+": consumer info not read; no more dispatchers started", "error", err)
		return
	}
	extra := fanOutCount(info.NumPending, uint64(info.NumAckPending), f.cfg.Concurrency, f.wakers.fanout, self)
	if extra > 0 {
		f.log.InfoContext(ctx, why+": starting more dispatcher invocations", "pending", info.NumPending, "ack_pending", info.NumAckPending, "starting", extra)
		f.wakers.self.Wake(extra)
	}
}

// fanOutCount is how many more dispatcher invocations to start: the
// backlog's worth, at most most, less the running ones (estimated from
// what they hold unacknowledged, plus self that fetched nothing yet).
// Undelivered messages always get at least one.
func fanOutCount(pending, ackPending uint64, perInvocation, most, self int) int {
	if perInvocation < 1 {
		perInvocation = 1
	}
	per := uint64(perInvocation)
	want := min(int((pending+ackPending+per-1)/per), most)
	running := int((ackPending+per-1)/per) + self
	n := max(want-running, 0)
	if n == 0 && pending > 0 && self == 0 {
		n = 1
	}
	return n
}

// fits fails an invocation whose deadline leaves no room for the stage's
// unit of work: the dispatcher starts a handler only while
// MOLECULE_HANDLER_TIMEOUT plus its start margin fit, the replier takes a
// reply only while its longest post (the notify timeout, or the shortest
// a2a call plus its grace) plus its start margin fit. Without this, such an
// invocation returns success having done nothing, forever.
func (f *Function) fits(ctx context.Context) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(dl) - f.set.Margin.D()
	switch f.stage {
	case Dispatcher:
		var dc dispatcher.Config
		dc.SetDefaults()
		need := f.cfg.HandlerTimeout.D() + dc.StartMargin
		if left < need {
			return &ConfigError{fmt.Errorf("MOLECULE_HANDLER_TIMEOUT %s does not fit in this invocation: a handler starts only while it plus the %s start margin fit before the deadline less MOLECULE_DRAIN_MARGIN %s, and %s are left; give the function a timeout of at least %s, or lower MOLECULE_HANDLER_TIMEOUT",
				f.cfg.HandlerTimeout.D(), dc.StartMargin, f.set.Margin.D(), left.Round(time.Millisecond), (need + f.set.Margin.D()).Round(time.Second))}
		}
	case Replier:
		var rc replier.Config
		rc.SetDefaults()
		post := max(rc.NotifyTimeout, replier.MinA2ATimeout+replier.A2AGrace)
		need := post + rc.StartMargin
		if left < need {
			return &ConfigError{fmt.Errorf("the replier's function timeout is too short: a reply is taken only while its %s notify timeout plus the %s start margin fit before the deadline less MOLECULE_DRAIN_MARGIN %s, and %s are left; give the function a timeout of at least %s",
				post, rc.StartMargin, f.set.Margin.D(), left.Round(time.Millisecond), (need + f.set.Margin.D()).Round(time.Second))}
		}
	}
	return nil
}
