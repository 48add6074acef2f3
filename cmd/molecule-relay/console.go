package main

import (
	"context"
	"flag"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// defaultConsoleListen is where `molecule-relay console` listens when
// MOLECULE_CONSOLE_LISTEN is not set: loopback, so no token is needed.
const defaultConsoleListen = "127.0.0.1:8090"

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
	// A relay running on the same store holds it locked: join its server.
	if err := reachRunning(cfg, log); err != nil {
		return err
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
