package lambdafn

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/caarlos0/env/v11"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// Main runs stage: under the Lambda runtime when AWS_LAMBDA_RUNTIME_API is
// set, otherwise as a long-running worker (or one bounded run with --once).
// It returns the process exit code: 0 success, 1 failure, 2 bad
// configuration.
func Main(stage Stage) int {
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
		fn := New(stage, os.Environ(), lambdaLogger(os.Stderr, os.Getenv))
		lambda.StartWithOptions(fn.Invoke, lambda.WithEnableSIGTERM(fn.Close))
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return worker(ctx, stage, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
}

// worker is the long-running (or --once) mode.
func worker(ctx context.Context, stage Stage, args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(string(stage), flag.ContinueOnError)
	fs.SetOutput(stderr)
	fl := config.BindFlags(fs)
	once := fs.Bool("once", false, "one bounded run, then exit: 0 when everything was done, 1 otherwise")
	idle := fs.Duration("idle", time.Second, "with --once: how long a stage waits for a message still queued but not delivered yet (a retry waiting for its redelivery) before the run reports it pending; an empty queue is done at once")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// Secrets by ARN work here too (a container with the extension, or a
	// sidecar serving its API).
	m := env.ToMap(environ)
	if err := resolveSecrets(ctx, m, os.TempDir()); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", stage, err)
		return 2
	}
	environ = environ[:0:0]
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	cfg, err := config.Load(fl, environ)
	if err == nil {
		err = cfg.Validate(stage.need())
	}
	if err == nil && stage == Dispatcher {
		if _, herr := relay.NewHandler(cfg); herr != nil {
			err = fmt.Errorf("MOLECULE_HANDLER (--handler): %w", herr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", stage, err)
		return 2
	}
	// The runtime names each stage on its lines; a "stage" here would show
	// twice.
	log := cfg.NewLogger(stderr)
	rt, err := relay.OpenStages(ctx, cfg, log, stage.stages())
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", stage, err)
		return 1
	}
	defer rt.Close()
	stopMetrics, err := rt.ServeMetrics(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", stage, err)
		return 2
	}
	defer stopMetrics()
	if !*once {
		if err := rt.Run(ctx, stage.stages()); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", stage, err)
			return 1
		}
		return 0
	}
	rep, err := rt.Once(ctx, stage.stages(), *idle)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", stage, err)
		return 1
	}
	_ = json.NewEncoder(stdout).Encode(rep)
	if !rep.OK() {
		relay.PrintFailures(stderr, rep.Failures)
		return 1
	}
	return 0
}
