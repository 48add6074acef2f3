package console_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// runRelayWithConsole runs connect's Runtime (every stage) configured by
// env, with its console on a free loopback port signed in with token, and
// returns the Runtime and the console's address; the test's cleanup stops both. log, if
// non-nil, receives the relay's log.
func runRelayWithConsole(t *testing.T, token string, log *slog.Logger, env ...string) (*relay.Runtime, string) {
	t.Helper()
	env = append(env, "MOLECULE_CONSOLE_LISTEN=127.0.0.1:0", "MOLECULE_CONSOLE_TOKEN="+token)
	cfg, err := config.Load(nil, env)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform | config.NeedHandler)
	}
	if err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = pipelinetest.Logger()
	}
	rt, err := relay.Open(pipelinetest.Ctx(t), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	url, stop, err := rt.ServeConsole()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	running := pipelinetest.Start(t, func(ctx context.Context) error { return rt.Run(ctx, relay.All) })
	t.Cleanup(func() { _ = running.Stop() })
	return rt, url
}
