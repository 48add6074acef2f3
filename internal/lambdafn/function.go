// Package lambdafn runs one stage core as an AWS Lambda function or as a
// long-running worker: the functions/* binaries are one call to Main. It
// never embeds a NATS server: NATS_URL is required.
//
// A Lambda invocation is one bounded unit of work: the poller keeps a live
// window open (it polls with SSE wake-ups, as connect does, until the
// invocation's deadline minus a safety margin; MOLECULE_POLLER_WINDOW=false
// polls once), the dispatcher and replier drain their queue until it is
// empty or the deadline minus the margin. What one stage stores wakes the
// next stage's function by an asynchronous Lambda invoke (wake.go). The
// NATS connection is made once per execution environment, checked at the
// start of every invocation and redialled when dead; SIGTERM drains it.
package lambdafn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/caarlos0/env/v11"
	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// Stage is the stage core a function runs.
type Stage string

const (
	Poller     Stage = "poller"
	Dispatcher Stage = "dispatcher"
	Replier    Stage = "replier"
)

func (s Stage) stages() relay.Stages {
	switch s {
	case Poller:
		return relay.Stages{Poll: true}
	case Dispatcher:
		return relay.Stages{Dispatch: true}
	default:
		return relay.Stages{Reply: true}
	}
}

func (s Stage) need() config.Requirement {
	if s == Dispatcher {
		return config.NeedHandler
	}
	return config.NeedPlatform
}

// Errors returned to the Lambda runtime. aws-lambda-go reports the type's
// name as errorType ("ConfigError", "ConnectError", "PollError",
// "DrainError"), so alarms and retries can tell them apart.
type (
	// ConfigError: the function's configuration or secrets are wrong; no
	// retry will help until an operator fixes them.
	ConfigError struct{ Err error }
	// ConnectError: NATS could not be reached or the topology not ensured.
	ConnectError struct{ Err error }
	// PollError: one or more workspaces failed their poll.
	PollError struct{ Err error }
	// DrainError: the dispatcher or replier failed while draining.
	DrainError struct{ Err error }
)

func (e *ConfigError) Error() string  { return "configuration: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error  { return e.Err }
func (e *ConnectError) Error() string { return "nats: " + e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }
func (e *PollError) Error() string    { return "poll: " + e.Err.Error() }
func (e *PollError) Unwrap() error    { return e.Err }
func (e *DrainError) Error() string   { return "drain: " + e.Err.Error() }
func (e *DrainError) Unwrap() error   { return e.Err }

// Settings of the Lambda wrapper itself.
type lambdaSettings struct {
	// Margin is kept free before the invocation's deadline: work stops
	// this much earlier so the function can report. Default 3s.
	Margin config.Seconds `env:"MOLECULE_DRAIN_MARGIN" envDefault:"3s"`
	// Idle is how long an empty queue must stay empty for a drain to end.
	// Default 1s.
	Idle config.Seconds `env:"MOLECULE_DRAIN_IDLE" envDefault:"1s"`
	// HealthTimeout bounds the connection check at invocation start.
	// Default 2s.
	HealthTimeout config.Seconds `env:"MOLECULE_NATS_HEALTH_TIMEOUT" envDefault:"2s"`
	// PollerWindow: a poller invocation polls with SSE wake-ups until its
	// deadline minus Margin; false polls every workspace once. Default true.
	PollerWindow bool `env:"MOLECULE_POLLER_WINDOW" envDefault:"true"`
	Wake         wakeSettings
}

// Result is what an invocation did; it is the function's response.
type Result struct {
	Stage        Stage  `json:"stage"`
	Published    int    `json:"published,omitempty"`
	Handled      uint64 `json:"handled,omitempty"`
	Replied      uint64 `json:"replied,omitempty"`
	DeadLettered uint64 `json:"dead_lettered,omitempty"`
	// Redialled is true when the invocation found the NATS connection dead
	// and made a new one.
	Redialled bool `json:"redialled,omitempty"`
	// Warm is true when the invocation reused the execution environment's
	// connection.
	Warm bool `json:"warm"`
	// Woken counts the asynchronous invocations of other functions (or, for
	// the dispatcher's fan-out, of itself) this invocation sent.
	Woken int `json:"woken,omitempty"`
}

// Function is one stage as a Lambda handler. It is safe for the runtime's
// sequential invocations; the mutex guards against overlap in tests. Close
// (SIGTERM) may come during an invocation: it does not wait for mu.
type Function struct {
	stage   Stage
	environ []string
	log     *slog.Logger // the function's own lines, with its "stage"
	// rtLog is the runtime's logger, without a "stage": the runtime names
	// each stage on its lines (twice otherwise).
	rtLog *slog.Logger

	mu  sync.Mutex
	cfg *config.Config
	set lambdaSettings
	rt  *relay.Runtime
	// secrets are the raw secret values cfg was built from; a change (a
	// rotated token or NATS credential) rebuilds cfg and the connection.
	secrets   secretValues
	credsFile string // the NATS creds file written for cfg, if any
	wakers    wakers

	// What Close needs without mu: the NATS connection of rt (set with
	// it by setRuntime) and the invocation in progress, if any.
	conn     atomic.Pointer[broker.Conn]
	sig      sync.Mutex // guards inflight
	inflight *inflight
}

// New builds a Function; nothing is read or dialled until the first
// invocation.
func New(stage Stage, environ []string, log *slog.Logger) *Function {
	return &Function{stage: stage, environ: environ, log: log.With("stage", string(stage)), rtLog: log}
}

// load reads the configuration once per execution environment, and the
// secrets at every invocation (the extension caches them): when a secret
// changed since the configuration was built the configuration is rebuilt:
// a rotated workspace token gets new platform clients on the same
// connection, a rotated NATS credential a new connection, so a warm
// environment never keeps using a revoked value. If the secrets
// cannot be read on a warm invocation, the loaded ones are kept.
func (f *Function) load(ctx context.Context) error {
	m := env.ToMap(f.environ)
	sv, err := fetchSecrets(ctx, m)
	if f.cfg != nil {
		switch {
		case err != nil:
			f.log.WarnContext(ctx, "secrets not re-read; keeping the ones loaded", "error", err)
			return nil
		case sv == f.secrets:
			return nil
		}
		f.log.InfoContext(ctx, "a secret changed; reloading the configuration", "nats_credentials_changed", sv.creds != f.secrets.creds)
		if f.rt != nil && sv.creds != f.secrets.creds {
			f.rt.Close()
			f.setRuntime(nil)
		}
		f.cfg = nil
	}
	if err != nil {
		return &ConfigError{err}
	}
	var unchangedCreds string
	if sv.creds == f.secrets.creds {
		unchangedCreds = f.credsFile
	}
	if err := applySecrets(m, sv, os.TempDir(), unchangedCreds); err != nil {
		return &ConfigError{err}
	}
	var environ []string
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	cfg, err := config.Load(nil, environ)
	if err != nil {
		return &ConfigError{err}
	}
	if err := cfg.Validate(f.stage.need()); err != nil {
		return &ConfigError{err}
	}
	if cfg.NATS.URL == "" {
		return &ConfigError{errors.New("NATS_URL: not set; a function reaches NATS over the network (no embedded server)")}
	}
	if f.stage == Dispatcher {
		if _, err := relay.NewHandler(cfg); err != nil {
			return &ConfigError{fmt.Errorf("MOLECULE_HANDLER: %w", err)}
		}
	}
	var set lambdaSettings
	if err := env.ParseWithOptions(&set, env.Options{Environment: m}); err != nil {
		return &ConfigError{err}
	}
	w, err := newWakers(f.stage, set.Wake, m, f.log)
	if err != nil {
		return &ConfigError{err}
	}
	if f.credsFile != "" && f.credsFile != m["NATS_CREDS"] {
		_ = os.Remove(f.credsFile)
	}
	if f.rt != nil {
		// Only the tokens changed: same connection, new clients.
		if err := f.rt.Reconfigure(cfg); err != nil {
			return &ConfigError{err}
		}
	}
	f.cfg, f.set, f.secrets, f.wakers = cfg, set, sv, w
	if m[EnvNATSCredsSecret] != "" {
		f.credsFile = m["NATS_CREDS"]
	}
	return nil
}

// connect returns the environment's runtime, redialling a dead connection.
func (f *Function) connect(ctx context.Context, res *Result) error {
	if f.rt != nil {
		if err := f.rt.Conn.Healthy(ctx, f.set.HealthTimeout.D()); err == nil {
			res.Warm = true
			return nil
		} else {
			f.log.WarnContext(ctx, "NATS connection is dead; redialling", "err", err)
			f.rt.Close()
			f.setRuntime(nil)
			res.Redialled = true
		}
	}
	rt, err := relay.OpenStages(ctx, f.cfg, f.rtLog, f.stage.stages())
	if err != nil {
		return &ConnectError{err}
	}
	f.setRuntime(rt)
	return nil
}

// Invoke runs one bounded unit of the stage's work within ctx's deadline
// (less the safety margin), then sends the wake-ups it owes. The event (an
// EventBridge Scheduler payload or a wake-up) is not interpreted.
func (f *Function) Invoke(ctx context.Context, _ json.RawMessage) (*Result, error) {
	ctx, end := f.begin(ctx)
	defer end() // after the unlock below: Close waits for end, then locks
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &Result{Stage: f.stage}
	if err := f.load(ctx); err != nil {
		return nil, err
	}
	if err := f.fits(ctx); err != nil {
		return nil, err
	}
	if err := f.connect(ctx, res); err != nil {
		return nil, err
	}
	f.rt.Hooks = f.wakers.hooks()
	workCtx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		workCtx, cancel = context.WithDeadline(ctx, dl.Add(-f.set.Margin.D()))
		defer cancel()
	}
	err := f.work(workCtx, res)
	if f.stage == Dispatcher && err == nil && res.Handled+res.DeadLettered > 0 {
		// The drain also ends before the deadline, once no handler can
		// start any more: whatever is still undelivered needs successors.
		// A drain that took nothing does not chain: whatever keeps the
		// messages from it would keep them from a successor too, and the
		// schedule retries.
		f.handOver(ctx)
	}
	// The wake-ups go out even after a failure: what was stored before it
	// is still worth handling. The margin left after workCtx pays for them.
	res.Woken = f.wakers.flush(ctx)
	if err != nil {
		return nil, err
	}
	f.log.InfoContext(ctx, "invocation done", "published", res.Published, "handled", res.Handled,
		"replied", res.Replied, "dead_lettered", res.DeadLettered, "woken", res.Woken, "warm", res.Warm, "redialled", res.Redialled)
	return res, nil
}

// work runs the stage core once.
func (f *Function) work(ctx context.Context, res *Result) error {
	switch f.stage {
	case Poller:
		return f.poll(ctx, res)
	case Dispatcher:
		h, err := f.rt.Handler()
		if err != nil {
			return &ConfigError{err}
		}
		d, err := f.rt.Dispatcher(h)
		if err != nil {
			return &ConfigError{err}
		}
		f.fanOut(ctx)
		st, err := d.Drain(ctx, f.set.Idle.D())
		res.Handled, res.DeadLettered = st.Handled, st.DeadLettered
		if err != nil {
			return &DrainError{err}
		}
	default:
		r, err := f.rt.Replier()
		if err != nil {
			return &ConfigError{err}
		}
		st, err := r.Drain(ctx, f.set.Idle.D())
		res.Replied, res.DeadLettered = st.Notified+st.SentA2A+st.Reconciled, st.DeadLettered
		if err != nil {
			return &DrainError{err}
		}
	}
	return nil
}

// poll runs the poller: a live window until ctx's deadline (Run, with SSE
// wake-ups when MOLECULE_SSE allows), or one poll of every workspace
// without a deadline or with MOLECULE_POLLER_WINDOW=false.
func (f *Function) poll(ctx context.Context, res *Result) error {
	var published atomic.Int64
	f.rt.Hooks.OnPublished = func(n int) {
		published.Add(int64(n))
		f.wakers.published(n)
	}
	p, err := f.rt.Poller()
	if err != nil {
		return &ConfigError{err}
	}
	if _, ok := ctx.Deadline(); ok && f.set.PollerWindow {
		err := p.Run(ctx)
		res.Published = int(published.Load())
		if err != nil {
			return &PollError{err}
		}
		return nil
	}
	r, err := p.RunOnce(ctx)
	res.Published = r.Published()
	if res.Published > 0 {
		f.wakers.published(res.Published)
	}
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return &PollError{err}
	}
	return nil
}
