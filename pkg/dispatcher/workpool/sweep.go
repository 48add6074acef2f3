package workpool

import (
	"context"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/dlq"
	"github.com/nats-io/nats.go/jetstream"
)

// Swept is what a stage's pool needs to also move messages that exhausted
// their deliveries unacknowledged to the dead-letter stream.
type Swept struct {
	JS       jetstream.JetStream
	Consumer jetstream.Consumer
	Target   dlq.SweepTarget
	// Interval of Serve's periodic sweep.
	Interval time.Duration
	// Stage names the stage in log lines.
	Stage string
	Log   *slog.Logger
}

// Serve runs the pool until ctx ends (a stage's Run) with the periodic
// max-deliveries sweep alongside, and waits for both.
func (s Swept) Serve(ctx context.Context, cfg Config, opts Options, process Process) error {
	sweepCtx, stopSweep := context.WithCancel(ctx)
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		_ = dlq.SweepMaxDeliveries(sweepCtx, s.JS, s.Target, s.Interval, s.Log)
	}()
	err := Run(ctx, s.JS, s.Consumer, cfg, opts, process)
	stopSweep()
	<-sweepDone
	return err
}

// Drain sweeps once, listens for max-deliveries advisories, and runs the
// pool until it is idle (a stage's Drain).
func (s Swept) Drain(ctx context.Context, cfg Config, opts Options, process Process) error {
	if n, err := dlq.SweepOnce(ctx, s.JS, s.Target); err != nil && ctx.Err() == nil {
		s.Log.Warn(s.Stage+": sweep of max-delivered messages failed", "error", err)
	} else if n > 0 {
		s.Log.Warn(s.Stage+": moved max-delivered messages to the dead-letter stream", "count", n)
	}
	if sw, err := dlq.StartSweeper(s.JS, s.Target, s.Log); err == nil {
		defer sw.Stop()
	}
	return Run(ctx, s.JS, s.Consumer, cfg, opts, process)
}
