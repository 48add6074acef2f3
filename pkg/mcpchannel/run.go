package mcpchannel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/molecule-ai/molecule-relay/pkg/relay"
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
	stages chan error
	closed sync.Once
}

// Start takes the lease on rt's workspaces (an error matching
// ErrAlreadyRunning when another instance holds one) and starts the poller
// and the replier. It sets rt's handler timeout to MOLECULE_MCP_ANSWER_TIMEOUT,
// so the dispatcher waits as long as Claude may take. Close it when done.
func Start(ctx context.Context, rt *relay.Runtime, leaseCfg LeaseConfig) (*Relay, error) {
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
	lease, err := Acquire(ctx, rt.Conn.JS, ids, leaseCfg)
	if err != nil {
		return nil, err
	}
	rt.Cfg.HandlerTimeout = rt.Cfg.MCPAnswerTimeout
	sctx, cancel := context.WithCancel(ctx)
	r := &Relay{rt: rt, lease: lease, ch: NewChannel(rt.Log), log: rt.Log, cancel: cancel, stages: make(chan error, 1)}
	clients := rt.ClientMap()
	r.ch.names = newPeerDirectory(clients)
	r.srv = NewServer(ServerConfig{
		Channel: r.ch, Handled: rt.Topo.Handled, Replies: rt.Topo.Replies,
		Clients: clients, OnReady: r.dispatch, Logger: rt.Log,
	})
	go func() { r.stages <- rt.Run(sctx, relay.Stages{Poll: true, Reply: true}) }()
	return r, nil
}

// Channel is the relay's mcp handler.
func (r *Relay) Channel() *Channel { return r.ch }

// Serve serves one MCP client on in and out until it disconnects; it
// returns early with an error when the lease is lost or a stage fails.
func (r *Relay) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-r.lease.Lost():
			cancel(fmt.Errorf("%w: the workspace lease was lost (another instance took over)", ErrAlreadyRunning))
		case err := <-r.stages:
			r.stages <- err // for Close
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
	return func() { cancel(); <-done }
}

// Close stops the poller and the replier and releases the lease.
func (r *Relay) Close() error {
	var err error
	r.closed.Do(func() {
		r.cancel()
		err = <-r.stages
		r.lease.Release()
	})
	return err
}
