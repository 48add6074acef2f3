package lambdaemu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// ShutdownGrace is how long Stop waits between SIGTERM and SIGKILL: what
// Lambda gives a function whose only extension is internal (as
// lambda.WithEnableSIGTERM registers), 500 ms. Lambda does not wait for
// the process to exit by itself either; a SIGTERM handler has this long.
const ShutdownGrace = 500 * time.Millisecond

// Process is a bootstrap binary running as one Lambda execution environment
// against an Emulator. After a timed-out invocation the emulator destroys
// the environment and Process starts a fresh one (a new cold start), as
// Lambda does.
type Process struct {
	t    testing.TB
	emu  *Emulator
	bin  string
	env  []string
	out  pipelinetest.LogBuffer
	once sync.Once

	mu       sync.Mutex
	cmd      *exec.Cmd
	envp     *environment
	exited   chan struct{}
	starts   int
	started  time.Time
	stopping bool
	waitErr  error
}

// RunBootstrap starts binaryPath as a Lambda execution environment of emu,
// with the variables the provided.al2023 runtime sets
// (AWS_LAMBDA_RUNTIME_API, AWS_LAMBDA_FUNCTION_NAME,
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE, _HANDLER, AWS_REGION, ...) followed by
// env, whose entries win. The process's environment is otherwise empty
// except PATH and HOME, like Lambda's. Its stdout and stderr are captured
// (Output) and logged if the test fails. At test cleanup it is stopped with
// SIGTERM, then SIGKILL after ShutdownGrace.
func RunBootstrap(t testing.TB, emu *Emulator, binaryPath string, env []string) *Process {
	t.Helper()
	p, err := startProcess(t, emu, binaryPath, env)
	if err != nil {
		t.Fatalf("lambdaemu: start %s: %v", binaryPath, err)
	}
	return p
}

// startProcess is RunBootstrap returning its error, for goroutines other
// than the test's (a Service scaling out).
func startProcess(t testing.TB, emu *Emulator, binaryPath string, env []string) (*Process, error) {
	p := &Process{t: t, emu: emu, bin: binaryPath, env: env}
	if err := p.start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("lambdaemu: output of %s:\n%s", binaryPath, p.Output())
		}
	})
	return p, nil
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	api, envp := p.emu.newEnvironment(p.killForTimeout)
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"TZ=:UTC",
		"AWS_LAMBDA_RUNTIME_API=" + api,
		"AWS_LAMBDA_FUNCTION_NAME=" + p.emu.opts.FunctionName,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + p.emu.opts.FunctionName,
		"AWS_LAMBDA_LOG_STREAM_NAME=emulated",
		"AWS_EXECUTION_ENV=AWS_Lambda_provided.al2023",
		"AWS_REGION=" + defaultFunctionRegion,
		"AWS_DEFAULT_REGION=" + defaultFunctionRegion,
		"_HANDLER=bootstrap",
	}
	cmd := exec.Command(p.bin)
	cmd.Env = append(base, p.env...) // later duplicates win
	cmd.Stdout = &p.out
	cmd.Stderr = &p.out
	p.starts++
	fmt.Fprintf(&p.out, "--- lambdaemu: start %d of %s ---\n", p.starts, p.bin)
	if err := cmd.Start(); err != nil {
		p.emu.envExited(envp, err.Error())
		return err
	}
	exited := make(chan struct{})
	p.cmd, p.envp, p.exited, p.started = cmd, envp, exited, time.Now()
	go p.wait(cmd, envp, exited)
	return nil
}

func (p *Process) wait(cmd *exec.Cmd, envp *environment, exited chan struct{}) {
	err := cmd.Wait()
	reason := "exit status 0"
	if err != nil {
		reason = err.Error()
	}
	fmt.Fprintf(&p.out, "--- lambdaemu: process exited: %s ---\n", reason)
	p.emu.envExited(envp, "RequestId: process exited: "+reason)
	p.mu.Lock()
	p.waitErr = err
	p.mu.Unlock()
	close(exited)
}

// killForTimeout is the environment's onKill: destroy the process and start
// a fresh environment.
func (p *Process) killForTimeout() {
	p.mu.Lock()
	cmd, exited, stopping := p.cmd, p.exited, p.stopping
	p.mu.Unlock()
	if stopping || cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
	p.mu.Lock()
	stopping = p.stopping
	p.mu.Unlock()
	if stopping {
		return
	}
	if err := p.start(); err != nil {
		fmt.Fprintf(&p.out, "--- lambdaemu: restart after timeout failed: %v ---\n", err)
	}
}

// Starts returns how many processes (execution environments) have been
// started: 1 until an invocation timed out or Restart was called.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// StartedAt returns when the current process was started.
func (p *Process) StartedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Exited returns a channel closed when the current process exits.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// ExitErr returns the error of the last process exit (nil for status 0 or
// while running).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Output returns everything the processes wrote to stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// Kill kills the current process with SIGKILL (a crash) and waits for it.
// It is not restarted; call Restart.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// Restart stops the current process as Stop does and starts a new one.
func (p *Process) Restart() {
	p.t.Helper()
	p.stopCurrent()
	if err := p.start(); err != nil {
		p.t.Fatalf("lambdaemu: restart %s: %v", p.bin, err)
	}
}

// Stop ends the execution environment as Lambda does at spin-down: the
// SHUTDOWN event to extensions, SIGTERM to the process, SIGKILL after
// ShutdownGrace. It is safe to call more than once.
func (p *Process) Stop() {
	p.once.Do(func() {
		p.mu.Lock()
		p.stopping = true
		p.mu.Unlock()
		p.stopCurrent()
	})
}

// Signal sends sig to the current process.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Signal(sig)
}

func (p *Process) stopCurrent() {
	p.mu.Lock()
	cmd, envp, exited := p.cmd, p.envp, p.exited
	p.mu.Unlock()
	p.emu.shutdownEnv(envp)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = cmd.Process.Kill()
	}
	select {
	case <-exited:
	case <-time.After(ShutdownGrace):
		// The normal end of an execution environment whose runtime does
		// not exit on SIGTERM (aws-lambda-go only runs the handlers).
		fmt.Fprintf(&p.out, "--- lambdaemu: SIGKILL %s after SIGTERM ---\n", ShutdownGrace)
		_ = cmd.Process.Kill()
		<-exited
	}
}
