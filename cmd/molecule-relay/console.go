package main

import (
	"context"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// defaultConsoleListen is where `molecule-relay console` listens when
// MOLECULE_CONSOLE_LISTEN is not set: loopback, so no token is needed.
const defaultConsoleListen = "127.0.0.1:8090"

// runningRelay, when set, finds the NATS URL of a relay running on the
// embedded store of cfg, so that the console joins it instead of opening
// the store (which the running relay holds locked).
//
// HOOK (issue 40, item 1): the CLI's way into a running relay's embedded
// server (s44-cli, internal/relay/embedded) fills this in; until then the
// console command reaches a running relay through NATS_URL only.
var runningRelay func(cfg *config.Config) (url string, ok bool)

// runConsole serves the console against NATS_URL, or the embedded store.
func runConsole(ctx context.Context, env *cliEnv, args []string) error {
	cfg, err := parseConfig(env, "console", args, 0, nil)
	if err != nil {
		return err
	}
	if cfg.NATS.URL == "" && runningRelay != nil {
		if url, ok := runningRelay(cfg); ok {
			cfg.NATS.URL = url
		}
	}
	if cfg.ConsoleListen == "" {
		cfg.ConsoleListen = defaultConsoleListen
	}
	log := cfg.NewLogger(env.stderr)
	if err := console.CheckListen(cfg.ConsoleListen, console.Options{Token: cfg.ConsoleToken}); err != nil {
		return usageError{err}
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
