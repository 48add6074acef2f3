// Command molecule-relay runs Molecule Relay: poll the Molecule platform's
// activity feed, dispatch each message to a handler through NATS JetStream,
// and route the replies back. Run "molecule-relay help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/version"
	// The CLI embeds a NATS server when NATS_URL is not set.
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	_ "github.com/molecule-ai/molecule-relay/internal/relay/embedded"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // something failed or was dead-lettered
	exitUsage  = 2 // bad command line or configuration; nothing was contacted
	exitBusy   = 3 // mcp --no-wait: another session serves one of the workspaces
)

// usageError is a bad command line or configuration (exit 2), as is any
// error that matches configerr.ErrInvalid.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

type command struct {
	name, summary string
	run           func(ctx context.Context, env *cliEnv, args []string) error
}

// cliEnv is the process environment a command runs in; tests supply their own.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string
	// flagSink, when set, receives a command's flag set instead of
	// parsing it (completion lists the flags this way).
	flagSink func(*flag.FlagSet)
}

var commands []command

func init() {
	commands = []command{
		{"dev", "whole pipeline against an embedded platform double and embedded NATS; type messages and see replies", runDev},
		{"emulator", "the platform double alone on 127.0.0.1, for trying connect: prints the environment to use, sends the messages you type", runEmulator},
		{"connect", "poller, dispatcher and replier in one process (--once: drain and exit, for CI)", runConnect},
		{"poll", "the poller stage only (--once: one poll of every workspace)", runStage("poll")},
		{"dispatch", "the dispatcher stage only (--once: drain the inbound queue)", runStage("dispatch")},
		{"reply", "the replier stage only (--once: drain the reply queue)", runStage("reply")},
		{"doctor", "check a configuration without changing anything: platform, token, workspace state, poll mode, rate limit, event stream, NATS", runDoctor},
		{"status", "workspaces, cursors, streams, consumer lag and dead letters (--json)", runStatus},
		{"mcp", "Claude Code channel: an MCP stdio server on the durable pipeline; mcp install configures Claude Code for it (docs/claude-channel.md)", runMCP},
		{"dlq", "dead letters: list | show SEQ | replay SEQ | purge", runDLQ},
		{"console", "the operator console in a browser: workspaces, live flow, dead letters, memory, NATS (MOLECULE_CONSOLE_LISTEN, default 127.0.0.1:8090)", runConsole},
		{"workspaces", "the workspace registry (MOLECULE_WORKSPACE_REGISTRY): add | import | remove | pause | resume | list | rotate-key", runWorkspaces},
		{"history", "conversation memory: show | forget <workspace> [conversation]", runHistory},
		{"completion", "print a shell completion script: completion bash | zsh | fish", runCompletion},
		{"version", "print the version (also --version)", func(_ context.Context, e *cliEnv, _ []string) error {
			fmt.Fprintln(e.stdout, "molecule-relay", version.String())
			return nil
		}},
	}
}

func main() { os.Exit(runProcess(os.Args[1:])) }

// runProcess runs args as the process: SIGINT or SIGTERM ends the
// command's context, which begins a graceful stop (MOLECULE_STOP_GRACE).
// The signals are then released, so a second one ends the process at
// once (Ctrl-C twice). mcp keeps them until it exits: Claude Code stops a
// server with SIGINT and then SIGTERM 100 ms later as one stop, and that
// SIGTERM must not turn mcp's clean exit 0 into 143.
func runProcess(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 || args[0] != "mcp" {
		context.AfterFunc(ctx, stop)
		ctx = relay.WithSecondSignalExits(ctx)
	}
	return run(ctx, &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ()}, args)
}

func run(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 {
		usage(env.stderr)
		return exitUsage
	}
	if isHelpArg(args[0]) {
		if len(args) > 1 && !isHelpArg(args[1]) { // help connect → connect -h
			return run(ctx, env, []string{args[1], "-h"})
		}
		usage(env.stdout)
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		var ue usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, &ue), errors.Is(err, configerr.ErrInvalid): // any package's configuration error
			fmt.Fprintf(env.stderr, "molecule-relay %s: %v\n", c.name, err)
			return exitUsage
		case errors.Is(err, mcpchannel.ErrAlreadyRunning): // another mcp instance holds a workspace
			fmt.Fprintf(env.stderr, "molecule-relay %s: %v\n", c.name, err)
			return exitBusy
		default:
			fmt.Fprintf(env.stderr, "molecule-relay %s: %v\n", c.name, err)
			return exitFailed
		}
	}
	fmt.Fprintf(env.stderr, "molecule-relay: unknown command %q\n\n", args[0])
	usage(env.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: molecule-relay <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every flag mirrors an environment variable: --poll-interval is MOLECULE_POLL_INTERVAL,")
	fmt.Fprintln(w, "--nats-url is NATS_URL. Run molecule-relay <command> -h for a command's flags and settings.")
}
