package bench_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// relayProc is the benchmark's handle on a child process (a re-executed
// copy of this test binary): the relay (TestRelayChild) or the HTTP sink
// of BenchmarkFloor (TestHTTPSinkChild).
type relayProc struct {
	mu     sync.Mutex
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// startRelayProc starts the relay process and waits until it is ready.
func startRelayProc(b testing.TB, cfg relayConfig) *relayProc {
	b.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rp := startChildProc(b, "TestRelayChild", childEnv+"="+string(raw))
	var ready string
	if err := rp.read(&ready); err != nil || ready != "ready" {
		b.Fatalf("relay process not ready (%q, %v); stderr: %.2000s", ready, err, rp.stderr.String())
	}
	return rp
}

// startChildProc re-executes this test binary as the child test testName
// with env (KEY=value) set: commands go to its stdin, answers come on its
// stdout (read). It stops when its stdin closes, at cleanup.
func startChildProc(b testing.TB, testName, env string) *relayProc {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+testName+"$", "-test.count", "1", "-test.timeout", "0")
	cmd.Env = append(os.Environ(), env)
	rp := &relayProc{}
	cmd.Stderr = &rp.stderr
	var err error
	if rp.in, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", testName, err)
	}
	rp.out = bufio.NewScanner(stdout)
	rp.out.Buffer(make([]byte, 64<<10), 1<<20)
	b.Cleanup(func() {
		rp.in.Close() // the child stops when its stdin closes
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Logf("%s: %v; stderr: %.1000s", testName, err, rp.stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			b.Logf("%s killed after 30s; stderr: %.1000s", testName, rp.stderr.String())
		}
	})
	return rp
}

// read decodes the child's next answer into v, passing other output.
func (rp *relayProc) read(v any) error {
	for rp.out.Scan() {
		line, ok := strings.CutPrefix(rp.out.Text(), childPrefix)
		if ok {
			return json.Unmarshal([]byte(line), v)
		}
	}
	if err := rp.out.Err(); err != nil {
		return err
	}
	return io.EOF
}

// call sends one command and decodes its answer into v.
func (rp *relayProc) call(cmd string, v any) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if _, err := fmt.Fprintln(rp.in, cmd); err != nil {
		return err
	}
	return rp.read(v)
}

func (rp *relayProc) stats(b testing.TB) relayStats {
	var st relayStats
	if err := rp.call("stats", &st); err != nil {
		b.Fatalf("relay process stats: %v; stderr: %.1000s", err, rp.stderr.String())
	}
	return st
}

// replied is the relay's delivered replies (the "replied" command: the
// wait loop's poll, cheaper than stats).
func (rp *relayProc) replied(b testing.TB) uint64 {
	var n uint64
	if err := rp.call("replied", &n); err != nil {
		b.Fatalf("relay process replied: %v; stderr: %.1000s", err, rp.stderr.String())
	}
	return n
}

// command sends a profile command; the relay answers "ok" or an error.
func (rp *relayProc) command(b testing.TB, cmd string) {
	var msg string
	if err := rp.call(cmd, &msg); err != nil || msg != "ok" {
		b.Fatalf("relay process %q: %q %v", cmd, msg, err)
	}
}
