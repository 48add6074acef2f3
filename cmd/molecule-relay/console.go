package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// defaultConsoleListen is where `molecule-relay console` listens when
// MOLECULE_CONSOLE_LISTEN is not set: loopback, so no token is needed.
const defaultConsoleListen = "127.0.0.1:8090"

// reachRunningRelay, when set, points cfg at the embedded server of a
// relay running on the same store, so that the console joins it instead
// of opening the store (which the running relay holds locked).
//
// HOOK (issue 40, item 1): the CLI's way into a running relay (branch
// s44-cli: reachRunning in cmd/molecule-relay/running.go, on
// embedded.Running) fills it in with one line once both are merged:
//
//	func init() { reachRunningRelay = reachRunning }
//
// Until then the console command reaches a running relay through
// NATS_URL only.
var reachRunningRelay func(cfg *config.Config, log *slog.Logger) error

// runConsole serves the console against NATS_URL, or the embedded store.
func runConsole(ctx context.Context, env *cliEnv, args []string) error {
	cfg, err := parseConfig(env, "console", args, 0, nil)
	if err != nil {
		return err
	}
	if cfg.ConsoleListen == "" {
		cfg.ConsoleListen = defaultConsoleListen
	}
	if err := console.CheckListen(cfg.ConsoleListen, console.Options{Token: cfg.ConsoleToken}); err != nil {
		return usageError{err}
	}
	log := cfg.NewLogger(env.stderr)
	if reachRunningRelay != nil {
		if err := reachRunningRelay(cfg, log); err != nil {
			return err
		}
	}
	rt, err := relay.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer rt.Close()
	_, stop, err := rt.ServeConsole()
	if err != nil {
		return err
	}
	defer stop()
	<-ctx.Done()
	return nil
}

// consoleFlag is --console of connect, the stage commands and mcp: serve
// the console on defaultConsoleListen unless MOLECULE_CONSOLE_LISTEN
// names another address.
type consoleFlag bool

func (f *consoleFlag) bind(fs *flag.FlagSet) {
	fs.BoolVar((*bool)(f), "console", false, "serve the operator console on "+defaultConsoleListen+" (MOLECULE_CONSOLE_LISTEN: another address)")
}

func (f consoleFlag) apply(cfg *config.Config) {
	if f && cfg.ConsoleListen == "" {
		cfg.ConsoleListen = defaultConsoleListen
	}
}
