package main

import (
	"context"
	"errors"

	"github.com/molecule-ai/molecule-relay/pkg/config"
	"github.com/molecule-ai/molecule-relay/pkg/mcpchannel"
	"github.com/molecule-ai/molecule-relay/pkg/relay"
)

// runMCP serves Claude Code over stdin/stdout: the poller and replier run
// all along, the dispatcher (handler kind mcp) while the client is
// connected. Logs go to stderr only: stdout is the protocol.
func runMCP(ctx context.Context, env *cliEnv, args []string) error {
	cfg, err := parseConfig(env, "mcp", args, config.NeedPlatform, nil)
	if err != nil {
		return err
	}
	log := cfg.NewLogger(env.stderr)
	rt, closeAll, err := openServingMetrics(ctx, cfg, log, relay.All)
	if err != nil {
		return err
	}
	defer closeAll()
	r, err := mcpchannel.Start(ctx, rt, mcpchannel.LeaseConfig{})
	if err != nil {
		return err
	}
	log.Info("mcp: serving Claude Code on stdin/stdout", "workspaces", len(rt.Clients), "nats", rt.Conn.URL())
	err = r.Serve(ctx, env.stdin, env.stdout)
	if cerr := r.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	return err
}
