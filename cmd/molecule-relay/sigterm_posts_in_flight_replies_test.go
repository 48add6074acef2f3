package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// envChildArgs makes the test binary run the CLI with these arguments (space
// separated) as a real process: the SIGTERM tests signal it.
const envChildArgs = "MOLECULE_RELAY_TEST_CHILD_ARGS"

// TestCLIChildProcess is not a test: it is the child process of the stop
// tests, the CLI run as main runs it (signals included).
func TestCLIChildProcess(t *testing.T) {
	args := os.Getenv(envChildArgs)
	if args == "" {
		t.Skip("the child process of the SIGTERM tests")
	}
	os.Exit(runProcess(strings.Fields(args)))
}

// child is the CLI in its own process; its stderr lines are kept.
type child struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	errs []string
	seen chan string // every stderr line, for waitLog
	done chan error
}

func startChild(t *testing.T, environ []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCLIChildProcess$", "-test.count", "1", "-test.timeout", "0")
	cmd.Env = append(environ, envChildArgs+"="+strings.Join(args, " "), "HOME="+t.TempDir(), "PATH="+os.Getenv("PATH"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the CLI child: %v", err)
	}
	c := &child{cmd: cmd, seen: make(chan string, 4096), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.errs = append(c.errs, sc.Text())
			c.mu.Unlock()
			select {
			case c.seen <- sc.Text():
			default:
			}
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

func (c *child) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}

// waitLog waits for a stderr line containing want.
func (c *child) waitLog(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-c.seen:
			if strings.Contains(l, want) {
				return l
			}
		case <-deadline:
			t.Fatalf("no log line with %q within %s; stderr:\n%s", want, within, c.stderr())
		}
	}
}

// wait waits for the child's exit and returns its code.
func (c *child) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the child did not exit within %s; stderr:\n%s", within, c.stderr())
		return -1
	}
}

// blockingAgent is an http: handler that holds every call until release.
type blockingAgent struct {
	srv      *httptest.Server
	mu       sync.Mutex
	calls    int
	arrived  chan struct{}
	release  chan struct{}
	released sync.Once
}

func newBlockingAgent(t *testing.T) *blockingAgent {
	a := &blockingAgent{arrived: make(chan struct{}, 1000), release: make(chan struct{})}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a.mu.Lock()
		a.calls++
		n := a.calls
		a.mu.Unlock()
		a.arrived <- struct{}{}
		select {
		case <-a.release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, `{"reply":"done %d"}`, n)
	}))
	t.Cleanup(func() { a.open(); a.srv.Close() })
	return a
}

func (a *blockingAgent) open() { a.released.Do(func() { close(a.release) }) }

func (a *blockingAgent) waitCalls(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for range n {
		select {
		case <-a.arrived:
		case <-deadline:
			t.Fatalf("fewer than %d handler calls within %s", n, within)
		}
	}
}

// SIGTERM to a busy connect finishes the job: the handlers in flight
// finish, their replies are posted and the process exits inside
// MOLECULE_STOP_GRACE, saying what it finished. Before, the dispatcher
// finished its handlers but the replier had already stopped: 0 of the
// replies were posted until the next start.
func TestSIGTERMPostsTheRepliesOfHandlersInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a relay process")
	}
	const inFlight = 20
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("stopping")
	agent := newBlockingAgent(t)
	environ := []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_STORE_DIR=" + t.TempDir(), "MOLECULE_POLL_INTERVAL=200ms", "MOLECULE_HANDLER=http:" + agent.srv.URL,
		"MOLECULE_CONCURRENCY=32", "MOLECULE_STOP_GRACE=20s", "MOLECULE_LOG_LEVEL=info"}
	c := startChild(t, environ, "connect")
	waitUntil(t, func() bool { return srv.Status(ws.ID).DeliveryMode == "poll" })
	for i := range inFlight {
		if code, _, err := srv.SendCanvas(context.Background(), ws.ID, fmt.Sprintf("job %d", i)); err != nil || code != 200 {
			t.Fatalf("send: %d %v", code, err)
		}
	}
	agent.waitCalls(t, inFlight, 30*time.Second)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The handlers finish only after the stop began.
	c.waitLog(t, "stop: finishing the work in flight", 10*time.Second)
	stopAt := time.Now()
	agent.open()
	if code := c.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, c.stderr())
	}
	took := time.Since(stopAt)
	if n := len(srv.Notifications(ws.ID)); n != inFlight {
		t.Fatalf("%d of %d replies posted before the exit; stderr:\n%s", n, inFlight, c.stderr())
	}
	if took > 20*time.Second {
		t.Errorf("exit %s after the stop began, beyond the 20s grace", took.Round(time.Millisecond))
	}
	log := c.stderr()
	if !strings.Contains(log, "stop: done") || !strings.Contains(log, "handled=20") || !strings.Contains(log, "replies_posted=20") {
		t.Errorf("the exit does not say what the stop finished; stderr:\n%s", log)
	}
	t.Logf("%d of %d replies posted; exit %s after the stop began\n%s", inFlight, inFlight, took.Round(time.Millisecond), c.stderr())
}
