package handler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Exit codes of an exec: program with a meaning (sysexits.h).
const (
	// ExitDataErr (EX_DATAERR, 65): the input is wrong; the message goes
	// to the dead-letter stream without a retry.
	ExitDataErr = 65
	// ExitTempFail (EX_TEMPFAIL, 75): try again later. Any other non-zero
	// exit is retried too.
	ExitTempFail = 75
)

// stderrTail is how much of a failed program's stderr an error keeps;
// stderrLines how many of its last lines the warn line shows.
const (
	stderrTail  = 2048
	stderrLines = 20
)

// pipeGrace is how long output is still read after the program exited and
// its process group was killed, for a descendant that escaped the group
// but holds the pipes open.
const pipeGrace = 2 * time.Second

// killGrace is how long a program whose context ended (its timeout, or
// the sender's tasks/cancel) has after SIGTERM before SIGKILL.
const killGrace = 2 * time.Second

// passEnv are the variables of the relay's environment every exec:
// program inherits; Options.Env adds those an operator names
// (MOLECULE_HANDLER_ENV).
var passEnv = []string{"PATH", "HOME", "LANG", "TZ"}

// ErrOutputTooLarge is matched when a reply exceeds Options.MaxOutputBytes.
// It also matches ErrPermanent.
var ErrOutputTooLarge = fmt.Errorf("%w: reply exceeds the output limit", ErrPermanent)

// ExitError is returned when an exec: program exits non-zero. It matches
// ErrPermanent when Code is ExitDataErr.
type ExitError struct {
	// Program is the program as the spec named it.
	Program string
	// Code is the exit status; -1 if the program was killed by a signal.
	Code int
	// Stderr is the last 2 KiB of the program's stderr.
	Stderr string
}

func (e *ExitError) Error() string {
	what := fmt.Sprintf("exit status %d", e.Code)
	switch e.Code {
	case -1:
		what = "killed by a signal"
	case ExitDataErr:
		what += " (EX_DATAERR)"
	case ExitTempFail:
		what += " (EX_TEMPFAIL)"
	}
	msg := fmt.Sprintf("handler: exec %s: %s", e.Program, what)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// Is makes errors.Is(err, ErrPermanent) true for EX_DATAERR.
func (e *ExitError) Is(target error) bool { return target == ErrPermanent && e.Code == ExitDataErr }

type execHandler struct {
	program string // as written in the spec, for errors
	path    string
	args    []string
	opts    Options
	// warned: the text-mode hint about a structured answer was logged.
	warned atomic.Bool
}

// NewExec returns the exec: handler. Each call runs program with args
// (no shell), in its own process group, with the Payload JSON on stdin and
// only the environment Options.Env describes (plus the agent API's
// MOLECULE_AGENT_API and MOLECULE_AGENT_TOKEN when the relay serves it).
// The reply is the trimmed stdout, or with Options.AnswerJSON a structured
// answer (ParseAnswer). A non-zero exit is an *ExitError: EX_DATAERR (65) is permanent,
// everything else, EX_TEMPFAIL (75) included, is retried. When the call's
// deadline passes, the whole process group is killed (SIGKILL) and the
// error wraps the context's error; the group is also killed when the
// program exits, so no background descendant outlives the call.
func NewExec(program string, args []string, opts Options) (Handler, error) {
	opts.SetDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	path, err := resolveProgram(program)
	if err != nil {
		return nil, err
	}
	return &execHandler{program: program, path: path, args: args, opts: opts}, nil
}

func (h *execHandler) String() string { return "exec:" + h.program }

// env is the program's environment: passEnv, then Options.Env, then the
// agent API's URL and this message's capability token.
func (h *execHandler) env(req *Request) []string {
	env := make([]string, 0, len(passEnv)+len(h.opts.Env)+2)
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// exec.Cmd keeps the last value of a duplicated key.
	env = append(env, h.opts.Env...)
	return append(env, agentEnv(req)...)
}

// Handle runs the program; its answer's text is the reply.
func (h *execHandler) Handle(ctx context.Context, req *Request) (string, error) {
	return textOf(h.Answer(ctx, req))
}

// Answer runs the program: its trimmed stdout is the reply text, or with
// Options.AnswerJSON a structured answer (ParseAnswer).
func (h *execHandler) Answer(ctx context.Context, req *Request) (Answer, error) {
	out, err := h.run(ctx, req)
	if err != nil || !h.opts.AnswerJSON {
		if err == nil && looksLikeAnswer(out) && !h.warned.Swap(true) {
			// Answers are read as they are configured, never guessed at; a
			// program printing exactly the answer's shape most likely
			// needs the setting, so say which (once).
			loggerOf(req).Warn("exec handler printed what looks like a structured answer; it is posted as text. Set MOLECULE_HANDLER_ANSWER=json (--handler-answer json) to read it as one",
				"program", h.program)
		}
		return Answer{Text: out}, err
	}
	a, err := ParseAnswer([]byte(out))
	if err != nil {
		return Answer{}, fmt.Errorf("handler: exec %s: %w", h.program, err)
	}
	return a, nil
}

// run runs the program once and returns its trimmed stdout.
func (h *execHandler) run(ctx context.Context, req *Request) (string, error) {
	in, err := marshalPayload(req)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	log := loggerOf(req)

	p, err := openPipes()
	if err != nil {
		return "", fmt.Errorf("handler: exec %s: %w", h.program, err)
	}
	defer p.inW.Close()
	defer p.outR.Close()
	defer p.errR.Close()

	cmd := exec.CommandContext(ctx, h.path, h.args...)
	cmd.Env = h.env(req)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW
	stopGrace := setProcessGroup(cmd, killGrace)
	start := time.Now()
	err = cmd.Start()
	p.closeChildEnds()
	if err != nil {
		return "", fmt.Errorf("handler: exec %s: start: %w", h.program, err)
	}
	log.Debug("exec started", "program", h.program, "pid", cmd.Process.Pid)

	stdout := &capBuffer{max: h.opts.MaxOutputBytes}
	stderr := &tailBuffer{max: stderrTail}
	copied := p.copy(in, stdout, stderr)

	stop := keepAlive(ctx, req, h.opts.ProgressInterval)
	waitErr := cmd.Wait()
	stop()
	stopGrace()
	killGroup(cmd)
	_ = p.inW.Close() // unblocks the stdin writer if nobody reads
	h.awaitOutput(p, copied, log)
	return h.result(ctx, waitErr, stdout, stderr, time.Since(start), log)
}

// execPipes are the program's stdin, stdout and stderr: our own pipes
// rather than exec's copying goroutines, so Wait returns when the program
// exits even if a descendant holds a pipe.
type execPipes struct {
	inR, inW, outR, outW, errR, errW *os.File
}

// openPipes opens the three pipes, or none.
func openPipes() (*execPipes, error) {
	var p execPipes
	var err error
	if p.inR, p.inW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.inR.Close()
		p.inW.Close()
		return nil, err
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.inR.Close()
		p.inW.Close()
		p.outR.Close()
		p.outW.Close()
		return nil, err
	}
	return &p, nil
}

// closeChildEnds closes the ends the started program holds (or, when it
// did not start, nobody needs).
func (p *execPipes) closeChildEnds() {
	p.inR.Close()
	p.outW.Close()
	p.errW.Close()
}

// copy writes in to the program's stdin and collects its stdout and
// stderr, each in its own goroutine; the WaitGroup says when all three are
// done.
func (p *execPipes) copy(in []byte, stdout *capBuffer, stderr *tailBuffer) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		// A program that does not read its stdin gets EPIPE here; fine.
		_, _ = p.inW.Write(in)
		_ = p.inW.Close()
	}()
	go func() { defer wg.Done(); _, _ = io.Copy(stdout, p.outR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(stderr, p.errR) }()
	return &wg
}

// awaitOutput waits for the copies to finish after the program exited, at
// most pipeGrace: a descendant outside the process group may hold the
// output open, and then the pipes are closed under it.
func (h *execHandler) awaitOutput(p *execPipes, copied *sync.WaitGroup, log *slog.Logger) {
	drained := make(chan struct{})
	go func() { copied.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(pipeGrace):
		log.Warn("exec: a descendant outside the process group holds the output open; closing it", "program", h.program)
		p.outR.Close()
		p.errR.Close()
		<-drained
	}
}

// result turns the program's end into the handler's answer: its trimmed
// stdout, or the error (killed by the timeout, an ExitError with the tail
// of stderr, or ErrOutputTooLarge).
func (h *execHandler) result(ctx context.Context, waitErr error, stdout *capBuffer, stderr *tailBuffer, elapsed time.Duration, log *slog.Logger) (string, error) {
	if ctxErr := ctx.Err(); ctxErr != nil {
		h.logStderr(log, "killed", elapsed, stderr)
		return "", fmt.Errorf("handler: exec %s: killed after %s: %w", h.program, elapsed.Round(time.Millisecond), ctxErr)
	}
	if waitErr != nil {
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			xe := &ExitError{Program: h.program, Code: ee.ExitCode(), Stderr: stderr.String()}
			h.logStderr(log, fmt.Sprintf("exit status %d", xe.Code), elapsed, stderr)
			return "", xe
		}
		return "", fmt.Errorf("handler: exec %s: %w", h.program, waitErr)
	}
	if stdout.overflow {
		return "", fmt.Errorf("%w: exec %s wrote more than %d bytes to stdout", ErrOutputTooLarge, h.program, h.opts.MaxOutputBytes)
	}
	log.Debug("exec done", "program", h.program, "elapsed", elapsed, "reply_bytes", len(stdout.buf))
	return strings.TrimSpace(string(stdout.buf)), nil
}

// logStderr logs the tail of a failed program's stderr at warn level
// (at most stderrLines lines of its last stderrTail bytes), where an
// operator sees why it failed. Only a tail: what a program prints there
// can be anything it was given, so a handler should not echo its message
// to stderr. The whole error (ExitError) goes to the dead letter.
func (h *execHandler) logStderr(log *slog.Logger, how string, elapsed time.Duration, stderr *tailBuffer) {
	tail := lastLines(strings.TrimSpace(stderr.String()), stderrLines)
	switch {
	case tail == "" && how == "killed":
		return // its timeout, a cancel or a stop's cut: the caller says which
	case tail == "":
		log.Warn("handler: exec failed with nothing on stderr", "program", h.program, "how", how, "elapsed", elapsed.Round(time.Millisecond).String())
		return
	}
	log.Warn("handler: exec failed; the tail of its stderr", "program", h.program, "how", how, "elapsed", elapsed.Round(time.Millisecond).String(),
		"stderr_tail", tail)
}

// lastLines is s's last n lines.
func lastLines(s string, n int) string {
	end := len(s)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			if n--; n == 0 {
				return "…" + s[i+1:end]
			}
		}
	}
	return s
}
