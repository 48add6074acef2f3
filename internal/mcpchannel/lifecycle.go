package mcpchannel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// DefaultRetryEvery is how often a session that waits for another one to
// end tries to take the channel over (Options.RetryEvery).
const DefaultRetryEvery = 100 * time.Millisecond

// DefaultCloseWait is Options.CloseWait's default: Claude Code sends
// SIGTERM 100 ms after SIGINT and SIGKILL at 500 ms.
const DefaultCloseWait = 40 * time.Millisecond

// handBackCloseWait replaces CloseWait when the stop handed messages back:
// the embedded server applies the hand-backs and writes its consumer state
// only as it shuts down, and without that the next session sees the
// messages again only after the consumer's AckWait (8 s), not after the
// retry delay (2 s). It stays clear of Claude's SIGKILL at 500 ms.
const handBackCloseWait = 300 * time.Millisecond

// Options configures Run.
type Options struct {
	// Open opens the relay: it connects to NATS, starting the embedded
	// server when NATS_URL is empty. An error matching
	// broker.ErrStoreLocked means another process holds the store; Run
	// tries again. Run calls closeRT when it is done with rt. Required.
	Open func(ctx context.Context) (rt *relay.Runtime, closeRT func(), err error)
	// Workspaces are the workspace ids served, for messages.
	Workspaces []string
	// Lease configures the workspace lease (Acquire).
	Lease LeaseConfig
	// NoWait: when another session holds the channel, return an error
	// matching ErrAlreadyRunning instead of serving the client and taking
	// over when that session ends. Default false (wait).
	NoWait bool
	// RetryEvery is how often a waiting session tries to take over. If not
	// set, DefaultRetryEvery.
	RetryEvery time.Duration
	// CloseWait bounds the wait for NATS to close (the embedded server
	// writes its stores' state) once everything else has stopped; Run
	// returns after it even if NATS has not finished, which is no worse
	// than the SIGKILL that would follow (the store recovers on the next
	// start; nothing acknowledged is lost). If not set, DefaultCloseWait.
	CloseWait time.Duration
	// Reach, when set, connects to the NATS of the session that holds the
	// store locked (the embedded server it publishes in the store), for a
	// session waiting for it to say so there (waiting.go); closeJS ends
	// the connection. Nil: such a waiting session is not listed.
	Reach  func(ctx context.Context) (js jetstream.JetStream, closeJS func(), err error)
	Logger *slog.Logger
}

// Run is the mcp command: it serves the MCP client on in and out at once,
// whether or not this session can have the channel, and attaches the relay
// (open the store, take the lease, start the poller and the replier) as
// soon as it can: a second session started while another holds the
// channel completes the handshake, lists its tools, says in its
// instructions, its log and its tool results that another session holds
// the channel, and takes over by itself when that one ends.
//
// It returns when the client goes (stdin ends, stdout breaks) or ctx ends
// (a signal), after an orderly stop: first delivery stops (a message shown
// and not answered goes back to JetStream), then the lease is released
// (a successor may start now), then the dispatcher, the poller and the
// replier finish and NATS closes. Both ends are a normal exit (nil),
// unless polling had stopped on every workspace (deleted, token refused,
// no poll mode), which the session outlived: then the error says why.
func Run(ctx context.Context, opts Options, in io.Reader, out io.Writer) error {
	if opts.RetryEvery <= 0 {
		opts.RetryEvery = DefaultRetryEvery
	}
	if opts.CloseWait <= 0 {
		opts.CloseWait = DefaultCloseWait
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &takeover{opts: opts, log: log, ch: NewChannel(log)}
	defer t.closeRT()
	why, err := t.try(ctx)
	if err != nil {
		return err
	}
	if why != nil && opts.NoWait {
		return why
	}

	srv := NewServer(ServerConfig{Channel: t.ch, Logger: log})
	attach := func() {
		t.r.releaseFirst = true
		srv.Attach(t.r.backend())
	}
	// Before the handshake can be answered: its instructions say whether
	// this session has the channel.
	if why != nil {
		srv.SetWaiting(why.Error())
	} else {
		attach()
	}
	sctx, endSession := context.WithCancel(ctx)
	defer endSession()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, in, out) }()

	if why != nil {
		log.Warn("mcp: another session holds the channel; this one lists its tools and delivers nothing until that session ends", "why", why)
		if ended, err := t.waitForChannel(ctx, srv, served, endSession, why); ended {
			return err
		}
		log.Info("mcp: the other session ended; this one has the channel now")
		attach()
	}
	r := t.r

	select {
	case err = <-served:
	case <-r.lease.Lost():
		endSession()
		<-served
		err = fmt.Errorf("%w: the workspace lease was lost (another instance took over)", ErrAlreadyRunning)
	case serr := <-r.failed:
		endSession()
		<-served
		err = fmt.Errorf("mcp: a stage stopped: %v", serr)
	}
	start := time.Now()
	if cerr := r.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	log.Debug("mcp: poller and replier stopped", "took", time.Since(start))
	if srv.handedBack.Load() > 0 {
		t.opts.CloseWait = max(t.opts.CloseWait, handBackCloseWait)
	}
	return err
}

// waitForChannel serves a session that another holds the channel from
// until this one takes it (false) or the session ends meanwhile (true,
// with what Run returns): it tries again when the holder's lease is
// released on a shared NATS (watched) or after retryIn, and keeps the
// session's instructions saying why it waits.
func (t *takeover) waitForChannel(ctx context.Context, srv *Server, served <-chan error, endSession func(), why error) (ended bool, err error) {
	var released <-chan struct{}
	stopWatch := func() {}
	defer func() { stopWatch() }()
	instance := waitingInstance(t.opts.Lease)
	unmark, marked, viaOwn := func() {}, false, false
	defer func() { unmark() }()
	for t.r == nil {
		// Once; again when a wait listed through the holder's server
		// (Reach) can be listed through this session's own NATS.
		if (!marked && t.opts.Reach != nil) || (t.rt != nil && !viaOwn) {
			unmark()
			unmark, marked, viaOwn = t.markWaiting(ctx, instance), true, t.rt != nil
		}
		if released == nil && t.rt != nil {
			// Waiting for a lease on a shared NATS: its release wakes us.
			if ch, stop, err := watchReleases(ctx, t.rt.Conn.JS, t.opts.Workspaces); err == nil {
				released, stopWatch = ch, stop
			}
		}
		retry := time.NewTimer(t.retryIn(why))
		select {
		case err := <-served:
			retry.Stop()
			return true, err
		case <-released:
		case <-retry.C:
		}
		retry.Stop()
		if ctx.Err() != nil { // a signal: stop, not a failure to open
			return true, <-served
		}
		why, err = t.try(ctx)
		if err != nil {
			endSession()
			serr := <-served
			if ctx.Err() != nil {
				return true, serr // the signal came during the try
			}
			return true, err
		}
		if why != nil {
			srv.SetWaiting(why.Error())
		}
	}
	return false, nil
}

// markWaiting lists this session as waiting (waiting.go) through the
// runtime's NATS, or, without one yet, through the holder's (Reach); the
// returned function ends the listing. A listing that cannot be written is
// logged: the wait goes on.
func (t *takeover) markWaiting(ctx context.Context, instance string) (unmark func()) {
	js, closeJS := jetstream.JetStream(nil), func() {}
	if t.rt != nil {
		js = t.rt.Conn.JS
	} else {
		var err error
		if js, closeJS, err = t.opts.Reach(ctx); err != nil {
			t.log.Debug("mcp: could not reach the session holding the store to list this one as waiting", "error", err)
			return func() {}
		}
	}
	stop, err := markWaiting(ctx, js, t.opts.Workspaces, instance, t.opts.Lease.Replicas)
	if err != nil {
		closeJS()
		t.log.Debug("mcp: could not list this session as waiting", "error", err)
		return func() {}
	}
	return func() {
		if !js.Conn().IsConnected() {
			closeJS() // the holder's server ended: its deletes would wait for nothing
		}
		stop()
		closeJS()
		if t.rt != nil && t.r != nil {
			if kv, err := t.rt.Conn.JS.KeyValue(ctx, events.BucketMCPLeases); err == nil {
				kvlease.SweepWaiting(ctx, kv, t.opts.Workspaces, instance) // listed in the store now ours
			}
		}
	}
}

// takeover holds what a session has opened on its way to the channel.
type takeover struct {
	opts    Options
	log     *slog.Logger
	rt      *relay.Runtime
	rtClose func()
	r       *Relay
	ch      *Channel
}

// try opens the relay and starts it. why is non-nil (and matches
// ErrAlreadyRunning) when another session holds the channel; err is any
// other failure.
func (t *takeover) try(ctx context.Context) (why, err error) {
	if t.rt == nil {
		rt, closeRT, err := t.opts.Open(ctx)
		if errors.Is(err, broker.ErrStoreLocked) {
			return fmt.Errorf("%w: workspace %s: %w", ErrAlreadyRunning, strings.Join(t.opts.Workspaces, ", "), err), nil
		}
		if err != nil {
			return nil, err
		}
		t.rt, t.rtClose = rt, closeRT
	}
	r, err := start(ctx, t.rt, t.opts.Lease, t.ch)
	if errors.Is(err, ErrAlreadyRunning) {
		return err, nil
	}
	if err != nil {
		return nil, err
	}
	t.r = r
	return nil, nil
}

// retryIn is how long to wait before the next try: RetryEvery for a
// locked store (a local lock, cheap to try); for a live lease, until it
// expires (its release wakes the wait earlier), so a waiting session costs
// the shared NATS one try per lease lifetime, not ten a second.
func (t *takeover) retryIn(why error) time.Duration {
	var held *HeldError
	if !errors.As(why, &held) {
		return t.opts.RetryEvery
	}
	return max(time.Until(held.Until)+10*time.Millisecond, t.opts.RetryEvery)
}

// closeRT closes NATS, waiting at most CloseWait.
func (t *takeover) closeRT() {
	if t.rtClose == nil {
		return
	}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.rtClose()
	}()
	timer := time.NewTimer(t.opts.CloseWait)
	defer timer.Stop()
	select {
	case <-done:
		t.log.Debug("mcp: NATS closed", "took", time.Since(start))
	case <-timer.C:
		t.log.Debug("mcp: not waiting longer for NATS to close; the store recovers on the next start", "waited", t.opts.CloseWait)
	}
}
