// Package chaos is the standing chaos test of Molecule Relay (make chaos,
// make chaos-long): the three stages as separate molecule-relay processes
// on an external nats-server process, the platform double over HTTP with
// injected 429, 500 and latency, canvas and peer traffic, random SIGKILLs
// of the stages and one of nats-server. This file holds the processes;
// chaos_test.go the scenario and its checks.
package chaos

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Process is a child process that can be SIGKILLed and started again with
// the same command line. It is safe for concurrent use.
type Process struct {
	Name string
	bin  string
	args []string
	env  []string
	log  string // file the output is appended to

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killed  *atomic.Bool // of the current run: Kill or Stop ended it
	starts  int
	stopped bool
	// selfExits counts runs that ended without Kill or Stop (the process
	// exited by itself); lastSelfExit is when the latest one did.
	selfExits    atomic.Int64
	lastSelfExit atomic.Int64 // unix nanoseconds
}

// NewProcess describes a process; Start runs it. Its output is appended to
// logPath.
func NewProcess(name, bin string, args, env []string, logPath string) *Process {
	return &Process{Name: name, bin: bin, args: args, env: env, log: logPath}
}

// Start runs the process unless it is running or Stop was called.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.runningLocked() {
		return nil
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "--- chaos: start %s (%d) at %s ---\n", p.Name, p.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	killed := &atomic.Bool{}
	p.cmd, p.exited, p.killed = cmd, exited, killed
	p.starts++
	go func() {
		err := cmd.Wait()
		if !killed.Load() {
			p.lastSelfExit.Store(time.Now().UnixNano())
			p.selfExits.Add(1)
		}
		fmt.Fprintf(out, "--- chaos: %s exited: %v ---\n", p.Name, err)
		out.Close()
		close(exited)
	}()
	return nil
}

func (p *Process) runningLocked() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// Kill sends SIGKILL and waits until the process is gone. It reports
// whether a running process was killed.
func (p *Process) Kill() bool {
	p.mu.Lock()
	cmd, exited, killed := p.cmd, p.exited, p.killed
	running := p.runningLocked()
	p.mu.Unlock()
	if !running {
		return false
	}
	killed.Store(true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return true
}

// Stop kills the process for good: Start does nothing afterwards.
func (p *Process) Stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.Kill()
}

// SelfExits is how many runs of the process ended by themselves (not by
// Kill or Stop), and when the latest one did (zero if none).
func (p *Process) SelfExits() (int64, time.Time) {
	n := p.selfExits.Load()
	if n == 0 {
		return 0, time.Time{}
	}
	return n, time.Unix(0, p.lastSelfExit.Load())
}

// Exited is closed when the current run of the process ends (nil before
// the first Start).
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Tail returns the last n bytes of the process's output.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.ToValidUTF8(b, nil))
}

// NATS is an external nats-server process with JetStream on a store
// directory, on a fixed loopback port so that a restart keeps its URL and
// its streams.
type NATS struct {
	*Process
	Port int
}

// NewNATS describes a nats-server on a free loopback port, storing under
// dir.
func NewNATS(bin, dir string) (*NATS, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "jetstream")}
	env := []string{"PATH=" + os.Getenv("PATH")}
	return &NATS{Process: NewProcess("nats-server", bin, args, env, filepath.Join(dir, "nats-server.log")), Port: port}, nil
}

// URL is the client URL.
func (n *NATS) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

// StartReady starts the server and waits until it accepts connections, or
// the process dies, or timeout passes.
func (n *NATS) StartReady(timeout time.Duration) error {
	if err := n.Start(); err != nil {
		return err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.Port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-n.Exited():
			return fmt.Errorf("nats-server exited at start-up:\n%s", n.Tail(2000))
		case <-deadline.C:
			return fmt.Errorf("nats-server not accepting connections within %s", timeout)
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
