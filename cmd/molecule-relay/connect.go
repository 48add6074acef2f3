package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// stageFlags are the flags shared by connect, poll, dispatch and reply.
type stageFlags struct {
	once    bool
	idle    time.Duration
	json    bool
	console consoleFlag
}

// openForInspection parses an inspection command's flags (status, dlq,
// history: no platform or handler needed) and opens the relay's NATS
// topology for it; the caller closes the runtime.
func openForInspection(ctx context.Context, env *cliEnv, name string, args []string, extra func(*flag.FlagSet)) (*relay.Runtime, *config.Config, error) {
	cfg, err := parseConfig(env, name, args, 0, extra)
	if err != nil {
		return nil, nil, err
	}
	log := cfg.NewLogger(env.stderr)
	if err := reachRunning(cfg, log); err != nil {
		return nil, nil, err
	}
	if cfg.NATS.Embedded() && !broker.StoreExists(cfg.NATS.StoreDir) {
		// Starting a server here would create an empty store and report
		// it healthy: the relay's store is elsewhere, or there is none.
		return nil, nil, fmt.Errorf("no relay store at %s (%s): start the relay with connect first, or point NATS_STORE_DIR (or MOLECULE_STATE_DIR) at its store, or NATS_URL at its NATS server",
			cfg.NATS.StoreDir, cfg.NATS.StoreFrom)
	}
	rt, err := relay.Open(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	return rt, cfg, nil
}

// parseConfig binds the config flags plus extra to a flag set, parses args
// and validates the configuration for need. Any failure is a usageError.
func parseConfig(env *cliEnv, name string, args []string, need config.Requirement, extra func(*flag.FlagSet)) (*config.Config, error) {
	fs := flag.NewFlagSet("molecule-relay "+name, flag.ContinueOnError)
	fl := config.BindFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(env, name, fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	warnUnknownVars(env)
	cfg, err := config.Load(fl, env.environ)
	if err != nil {
		return nil, usageError{err}
	}
	if err := cfg.Validate(need); err != nil {
		return nil, usageError{err}
	}
	if need&config.NeedHandler != 0 {
		// Build the handler once to validate its spec before anything is
		// contacted; the stages build their own.
		if _, err := relay.NewHandler(cfg); err != nil {
			return nil, usageError{fmt.Errorf("MOLECULE_HANDLER (--handler): %w", err)}
		}
	}
	return cfg, nil
}

func (s *stageFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&s.once, "once", false, "do one bounded run and exit: 0 when everything was delivered, 1 when something failed or was dead-lettered")
	fs.DurationVar(&s.idle, "idle", time.Second, "with --once: how long a stage waits for a message still queued but not delivered yet (a retry waiting for its redelivery) before the run reports it pending; an empty queue is done at once")
	fs.BoolVar(&s.json, "json", false, "with --once: print the run's report as JSON")
	s.console.bind(fs)
}

func runConnect(ctx context.Context, env *cliEnv, args []string) error {
	return runStages(ctx, env, "connect", args, relay.All, config.NeedPlatform|config.NeedHandler)
}

func runStage(which string) func(context.Context, *cliEnv, []string) error {
	return func(ctx context.Context, env *cliEnv, args []string) error {
		switch which {
		case "poll":
			return runStages(ctx, env, which, args, relay.Stages{Poll: true}, config.NeedPlatform)
		case "dispatch":
			return runStages(ctx, env, which, args, relay.Stages{Dispatch: true}, config.NeedHandler)
		default:
			return runStages(ctx, env, which, args, relay.Stages{Reply: true}, config.NeedPlatform)
		}
	}
}

func runStages(ctx context.Context, env *cliEnv, name string, args []string, stages relay.Stages, need config.Requirement) error {
	var sf stageFlags
	cfg, err := parseConfig(env, name, args, need, sf.bind)
	if err != nil {
		return err
	}
	sf.console.apply(cfg)
	if sf.once && stages.Poll && cfg.PushListen != "" {
		// The push ingress must be listening when the platform pushes; a
		// bounded run cannot receive anything.
		return usageError{fmt.Errorf("--once cannot be used with MOLECULE_PUSH_LISTEN (--push-listen): push mode needs a long-running %s", name)}
	}
	log := cfg.NewLogger(env.stderr)
	rt, closeAll, err := openServingMetrics(ctx, cfg, log, stages)
	if err != nil {
		return err
	}
	defer closeAll()
	if !sf.once {
		log.Info("running", "command", name, "workspaces", len(rt.Clients), "nats", rt.Conn.URL())
		return rt.Run(ctx, stages)
	}
	rep, err := rt.Once(ctx, stages, sf.idle)
	if err != nil {
		return err
	}
	if sf.json {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printOnce(env, rep)
	}
	if !rep.OK() {
		return fmt.Errorf("%w: %d failure(s), %d error(s), %d dead-lettered (see the report)", relay.ErrSomethingFailed, len(rep.Failures), len(rep.Errors), rep.DeadLettered)
	}
	return nil
}

func printOnce(env *cliEnv, rep *relay.OnceReport) {
	if rep.Poll != nil {
		for _, w := range rep.Poll.Workspaces {
			fmt.Fprintf(env.stdout, "polled %s: fetched %d, published %d, duplicates %d, skipped %d\n",
				w.WorkspaceID, w.Fetched, w.Published, w.Duplicates, sum(w.Skipped))
		}
	}
	fmt.Fprintf(env.stdout, "handled %d, replied %d, dead-lettered %d\n", rep.Handled, rep.Replied, rep.DeadLettered)
	relay.PrintFailures(env.stdout, rep.Failures)
	for _, e := range rep.Errors {
		fmt.Fprintln(env.stdout, "error:", e)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// openServingMetrics opens the relay for stages and starts its metrics
// endpoint and its console (each when configured); closeAll stops all.
func openServingMetrics(ctx context.Context, cfg *config.Config, log *slog.Logger, stages relay.Stages) (rt *relay.Runtime, closeAll func(), err error) {
	rt, err = relay.OpenStages(ctx, cfg, log, stages)
	if err != nil {
		return nil, nil, err
	}
	stop, err := rt.ServeMetrics(ctx)
	if err != nil {
		rt.Close()
		return nil, nil, err
	}
	_, stopConsole, err := rt.ServeConsole()
	if err != nil {
		stop()
		rt.Close()
		return nil, nil, err
	}
	return rt, func() { stopConsole(); stop(); rt.Close() }, nil
}
