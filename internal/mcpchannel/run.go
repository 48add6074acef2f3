package mcpchannel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

const (
	// mcpStopGrace caps MOLECULE_STOP_GRACE for mcp's stages: the drain
	// of queued replies ends 70 ms before it (relay's stop tail), and the
	// stop returns 35 ms before it, leaving Close time for NATS (CloseWait)
	// inside Claude Code's 500 ms.
	mcpStopGrace = 350 * time.Millisecond
	// mcpReplyDrainIdle: with the dispatcher stopped, every reply is
	// already stored, so a short wait shows the queue empty.
	mcpReplyDrainIdle = 50 * time.Millisecond
)

// Relay is the mcp command's pipeline: the poller and replier run from
// Start to Close, so messages are stored while no client is connected; the
// dispatcher, with the Channel as its handler, runs only while a client is
// connected and initialized.
type Relay struct {
	rt     *relay.Runtime
	lease  *Lease
	ch     *Channel
	srv    *Server
	log    *slog.Logger
	cancel context.CancelFunc
	stages chan error // the stages' end, for Close
	// failed holds the stages' error when it ends the session: not when
	// polling stopped on every workspace for a reason the platform keeps
	// (pollingStopped), which the tools then explain.
	failed  chan error
	closed  sync.Once
	clients map[string]*molecule.Client
	// releaseFirst: when the client goes, the lease is released before the
	// dispatcher drains (Run: the process is ending, a successor may start).
	releaseFirst bool
}

// Start takes the lease on rt's workspaces (an error matching
// ErrAlreadyRunning when another instance holds one) and starts the poller
// and the replier. It sets rt's handler timeout to MOLECULE_MCP_ANSWER_TIMEOUT,
// so the dispatcher waits as long as Claude may take. Close it when done.
func Start(ctx context.Context, rt *relay.Runtime, leaseCfg LeaseConfig) (*Relay, error) {
	return start(ctx, rt, leaseCfg, NewChannel(rt.Log))
}

// start is Start with the channel messages are shown through.
func start(ctx context.Context, rt *relay.Runtime, leaseCfg LeaseConfig, ch *Channel) (*Relay, error) {
	var ids []string
	for _, c := range rt.Clients {
		ids = append(ids, c.WorkspaceID())
	}
	if leaseCfg.Instance == "" {
		leaseCfg.Instance = rt.InstanceID()
	}
	if leaseCfg.Replicas == 0 {
		leaseCfg.Replicas = rt.Cfg.Replicas
	}
	leaseCfg.Logger = rt.Log
	if rt.Conn.Embedded() {
		// The embedded server's store is locked by this process: a lease
		// in it is a dead predecessor's (LeaseConfig.Exclusive).
		leaseCfg.Exclusive = true
	}
	lease, err := Acquire(ctx, rt.Conn.JS, ids, leaseCfg)
	if err != nil {
		return nil, err
	}
	rt.Cfg.HandlerTimeout = rt.Cfg.MCPAnswerTimeout
	// Claude Code sends SIGKILL about 500 ms after its SIGINT: the stop of
	// the poller and the replier (and the drain of the replies Claude gave)
	// must end well before, leaving time to close NATS.
	rt.Cfg.StopGrace = min(rt.Cfg.StopGrace, config.Seconds(mcpStopGrace))
	// The stages stop when the relay is closed, after the lease is
	// released and delivery stopped, not when ctx ends under them.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Relay{rt: rt, lease: lease, ch: ch, log: rt.Log, cancel: cancel, stages: make(chan error, 1), failed: make(chan error, 1)}
	r.ch.names = newPeerDirectory(r.backend().Clients)
	r.srv = NewServer(ServerConfig{Channel: r.ch, Logger: rt.Log})
	r.srv.Attach(r.backend())
	// The dispatcher runs outside this Run (dispatch) and is stopped
	// before Close ends sctx; the replies it published are posted at the
	// stop (ReplyDrain), not left for the next session.
	go func() {
		err := rt.Run(sctx, relay.Stages{Poll: true, Reply: true, ReplyDrain: mcpReplyDrainIdle})
		switch {
		case pollingStopped(err):
			r.log.Error("mcp: polling stopped on every workspace; the session stays, so that its tools can say why, but no new message arrives and replies wait in the queue for a later session", "error", err)
		case err != nil:
			r.failed <- err
		}
		r.stages <- err
	}()
	return r, nil
}

// pollingStopped is true when err is the stages' end after the poller
// stopped every workspace for a reason the platform keeps: deleted, token
// refused, no poll mode. Ending the session then would take the tools
// with it (get_workspace_info says the workspace was deleted) and show
// Claude Code a failed server with nothing to say why, and a session of
// several workspaces already outlives one of them stopping.
func pollingStopped(err error) bool {
	var joined interface{ Unwrap() []error } // poller.Run's per-workspace reasons
	if !errors.As(err, &joined) {
		return false
	}
	for _, e := range joined.Unwrap() {
		if !errors.Is(e, molecule.ErrWorkspaceRemoved) && !errors.Is(e, poller.ErrTokenRejected) && !errors.Is(e, molecule.ErrOldPlatform) {
			return false
		}
	}
	return len(joined.Unwrap()) > 0
}

// backend is what a Server needs from r.
func (r *Relay) backend() Backend {
	if r.clients == nil {
		r.clients = r.rt.ClientMap()
	}
	return Backend{Handled: r.rt.Topo.Handled, Replies: r.rt.Topo.Replies, Clients: r.clients, OnReady: r.dispatch, rt: r.rt}
}

// Channel is the relay's mcp handler.
func (r *Relay) Channel() *Channel { return r.ch }

// Serve serves one MCP client on in and out until it disconnects; it
// returns early with an error when the lease is lost or a stage fails,
// but not when polling stopped on every workspace for a reason the
// platform keeps (deleted, token refused, no poll mode: pollingStopped).
func (r *Relay) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-r.lease.Lost():
			cancel(fmt.Errorf("%w: the workspace lease was lost (another instance took over)", ErrAlreadyRunning))
		case err := <-r.failed:
			r.failed <- err // for the next client
			cancel(fmt.Errorf("mcp: a stage stopped: %v", err))
		case <-ctx.Done():
		}
	}()
	err := r.srv.Serve(ctx, in, out)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// dispatch starts the dispatcher for a ready client; the returned function
// stops it and waits for it.
func (r *Relay) dispatch() (stop func()) {
	d, err := r.rt.Dispatcher(r.ch)
	if err != nil {
		r.log.Error("mcp: dispatcher not started; messages wait in the queue", "error", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			r.log.Error("mcp: dispatcher stopped", "error", err)
		}
	}()
	return func() {
		if r.releaseFirst {
			r.lease.Release()
		}
		cancel()
		<-done
	}
}

// Close releases the lease, then stops the poller and the replier.
func (r *Relay) Close() error {
	var err error
	r.closed.Do(func() {
		r.lease.Release()
		r.cancel()
		err = <-r.stages
	})
	return err
}
