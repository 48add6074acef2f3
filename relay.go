package relay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/configerr"
	relayrt "github.com/molecule-ai/molecule-relay/internal/relay"
	_ "github.com/molecule-ai/molecule-relay/internal/relay/embedded" // NATS in the process when NATS_URL is empty, as connect
)

// Relay is a configured relay with its handler: NATS connected (the
// embedded server when NATS_URL is empty), the JetStream topology
// ensured, one platform client per workspace. Close it when done.
type Relay struct {
	rt     *relayrt.Runtime
	stages relayrt.Stages
}

// Stage is one stage of the relay.
type Stage int

const (
	// Poll reads the workspaces' activity feeds (and serves the push
	// ingress with MOLECULE_PUSH_LISTEN) into the inbound stream.
	Poll Stage = iota + 1
	// Dispatch runs the handler on each inbound message.
	Dispatch
	// Reply posts the answers to the platform.
	Reply
)

// Option configures a relay from code; options apply in order, over the
// environment.
type Option func(*options) error

type options struct {
	environ []string
	flags   *flag.FlagSet
	bound   *config.Flags
	log     *slog.Logger
	stages  relayrt.Stages
	staged  bool
}

// Environ replaces the environment the relay reads its settings from
// (os.Environ() by default) with environ, KEY=VALUE entries; nil reads
// none, for a relay configured from code alone.
func Environ(environ []string) Option {
	return func(o *options) error { o.environ = environ; return nil }
}

// Setting sets one setting by its environment variable's name, as
// `molecule-relay connect` reads it (docs/configuration.md lists
// them), over the environment: Setting("MOLECULE_POLL_INTERVAL", "1s").
func Setting(name, value string) Option {
	return func(o *options) error {
		if err := o.flags.Set(config.FlagName(name), value); err != nil {
			return fmt.Errorf("%w: %s is not a setting of the relay", ErrInvalidConfig, name)
		}
		return nil
	}
}

// Platform is the platform's URL (MOLECULE_PLATFORM_URL).
func Platform(url string) Option { return Setting("MOLECULE_PLATFORM_URL", url) }

// Workspace is the workspace served and its token (MOLECULE_WORKSPACE_ID,
// MOLECULE_WORKSPACE_TOKEN); the handler never sees the token. Several
// workspaces: Setting("MOLECULE_WORKSPACE_IDS", …) and its TOKENS.
func Workspace(id, token string) Option {
	return func(o *options) error {
		return errors.Join(Setting("MOLECULE_WORKSPACE_ID", id)(o), Setting("MOLECULE_WORKSPACE_TOKEN", token)(o))
	}
}

// Logger is where the relay logs (by default stderr, at
// MOLECULE_LOG_LEVEL in MOLECULE_LOG_FORMAT).
func Logger(l *slog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// Stages selects the stages the relay runs; all three by default (as
// connect; one alone as `molecule-relay poll`, `dispatch` or `reply`).
// The others run in other processes on the same NATS (NATS_URL).
func Stages(stages ...Stage) Option {
	return func(o *options) error {
		o.stages, o.staged = relayrt.Stages{}, true
		for _, s := range stages {
			switch s {
			case Poll:
				o.stages.Poll = true
			case Dispatch:
				o.stages.Dispatch = true
			case Reply:
				o.stages.Reply = true
			default:
				return fmt.Errorf("%w: stage %d", ErrInvalidConfig, s)
			}
		}
		return nil
	}
}

// ErrInvalidConfig is matched (errors.Is) by every configuration error;
// the error names the setting.
var ErrInvalidConfig = configerr.ErrInvalid

// New configures a relay that runs h on every message and connects it.
// With h nil the relay runs the built-in handler MOLECULE_HANDLER names
// (echo, exec:…, http:…, openai:…), as connect does.
func New(ctx context.Context, h Handler, opts ...Option) (*Relay, error) {
	o := options{environ: os.Environ(), flags: flag.NewFlagSet("relay", flag.ContinueOnError), stages: relayrt.All}
	o.bound = config.BindFlags(o.flags)
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.staged && o.stages == (relayrt.Stages{}) {
		return nil, fmt.Errorf("%w: no stage selected", ErrInvalidConfig)
	}
	cfg, err := config.Load(o.bound, o.environ)
	if err != nil {
		return nil, err
	}
	if err := validate(cfg, o.stages, h == nil); err != nil {
		return nil, err
	}
	if o.log == nil {
		o.log = cfg.NewLogger(os.Stderr)
	}
	rt, err := relayrt.OpenStages(ctx, cfg, o.log, o.stages)
	if err != nil {
		return nil, err
	}
	if h != nil {
		rt.SetHandler(asHandler(h))
	}
	return &Relay{rt: rt, stages: o.stages}, nil
}

// validate checks cfg for the stages s, as connect, poll, dispatch and
// reply do; spec: the handler is MOLECULE_HANDLER's.
func validate(cfg *config.Config, s relayrt.Stages, spec bool) error {
	var need config.Requirement
	if s.Poll || s.Reply {
		need |= config.NeedPlatform
	}
	if s.Dispatch && spec {
		need |= config.NeedHandler
	}
	if err := cfg.Validate(need); err != nil {
		return err
	}
	if need&config.NeedHandler != 0 {
		if _, err := relayrt.NewHandler(cfg); err != nil {
			return fmt.Errorf("%w: MOLECULE_HANDLER: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// Run configures a relay from the environment and opts, runs h on every
// message until ctx ends (Relay.Run) and closes it: the shortest program.
func Run(ctx context.Context, h Handler, opts ...Option) error {
	r, err := New(ctx, h, opts...)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Run(ctx)
}

// Run runs the relay's stages until ctx ends, with everything connect
// has: push ingress (MOLECULE_PUSH_LISTEN), poller groups
// (MOLECULE_POLLER_GROUP), direct posting, metrics (MOLECULE_METRICS_ADDR).
// When ctx ends it stops gracefully within MOLECULE_STOP_GRACE: no new
// work is taken, the handlers in flight finish and their answers are
// posted. The first stage that fails stops the others and its error is
// returned.
func (r *Relay) Run(ctx context.Context) error {
	stop, err := r.rt.ServeMetrics(ctx)
	if err != nil {
		return err
	}
	defer stop()
	return r.rt.Run(ctx, r.stages)
}

// Close closes the NATS connection (and stops the embedded server).
func (r *Relay) Close() { r.rt.Close() }
