package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// mcpProc is one `molecule-relay mcp` process (the built CLI) with the
// test as its MCP client on stdin/stdout, as Claude Code runs it.
type mcpProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *pipelinetest.LogBuffer
	exited chan struct{}
	code   int

	mu      sync.Mutex
	nextID  int
	waiters map[string]chan json.RawMessage
	notes   chan rpcNote
}

type rpcNote struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	at     time.Time
}

// startMCP starts the mcp command with environ and args.
func startMCP(t *testing.T, environ []string, args ...string) *mcpProc {
	t.Helper()
	cmd := exec.Command(relayBin(t), append([]string{"mcp"}, args...)...)
	cmd.Env = append(append([]string(nil), environ...), "HOME="+t.TempDir(), "PATH="+os.Getenv("PATH"))
	p := &mcpProc{t: t, cmd: cmd, stderr: &pipelinetest.LogBuffer{}, exited: make(chan struct{}),
		waiters: map[string]chan json.RawMessage{}, notes: make(chan rpcNote, 64)}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(out)
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("mcp process %d stderr:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

func (p *mcpProc) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		line := append([]byte(nil), sc.Bytes()...)
		if json.Unmarshal(line, &m) != nil {
			p.t.Errorf("non-JSON line on stdout: %q", line)
			continue
		}
		if m.Method != "" && len(m.ID) == 0 {
			p.notes <- rpcNote{Method: m.Method, Params: m.Params, at: time.Now()}
			continue
		}
		p.mu.Lock()
		w := p.waiters[string(m.ID)]
		delete(p.waiters, string(m.ID))
		p.mu.Unlock()
		if w != nil {
			w <- line
		}
	}
}

func (p *mcpProc) send(v any) {
	b, _ := json.Marshal(v)
	_, _ = p.stdin.Write(append(b, '\n'))
}

// request sends a JSON-RPC request and waits for its response.
func (p *mcpProc) request(method string, params any, within time.Duration) json.RawMessage {
	p.t.Helper()
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	w := make(chan json.RawMessage, 1)
	p.waiters[fmt.Sprint(id)] = w
	p.mu.Unlock()
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case r := <-w:
		return r
	case <-p.exited:
		p.t.Fatalf("%s: the process exited (code %d):\n%s", method, p.code, p.stderr.String())
	case <-time.After(within):
		p.t.Fatalf("%s: no response within %s:\n%s", method, within, p.stderr.String())
	}
	return nil
}

// initialize does Claude Code's handshake; it returns the result.
func (p *mcpProc) initialize() map[string]any {
	p.t.Helper()
	r := p.request("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "claude-code", "version": "test"}}, 10*time.Second)
	var res struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(r, &res); err != nil || res.Result == nil {
		p.t.Fatalf("initialize: %s", r)
	}
	p.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return res.Result
}

// callTool calls a tool and returns its text and isError.
func (p *mcpProc) callTool(name string, args map[string]any) (string, bool) {
	p.t.Helper()
	r := p.request("tools/call", map[string]any{"name": name, "arguments": args}, 30*time.Second)
	var res struct {
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r, &res); err != nil {
		p.t.Fatalf("tools/call %s: %s", name, r)
	}
	var b strings.Builder
	for _, c := range res.Result.Content {
		b.WriteString(c.Text)
	}
	return b.String(), res.Result.IsError
}

// nextNote waits for the next notification of method, skipping others
// (which the caller must not expect).
func (p *mcpProc) nextNote(method string, within time.Duration) json.RawMessage {
	p.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case n := <-p.notes:
			if n.Method == method {
				return n.Params
			}
			p.t.Errorf("unexpected %s notification: %s", n.Method, n.Params)
		case <-deadline:
			p.t.Fatalf("no %s within %s:\n%s", method, within, p.stderr.String())
			return nil
		}
	}
}

// nextMessage waits for the next channel notification; it returns its meta.
func (p *mcpProc) nextMessage(within time.Duration) (map[string]string, time.Time) {
	p.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case n := <-p.notes:
			if n.Method != "notifications/claude/channel" {
				continue
			}
			var params struct {
				Content string            `json:"content"`
				Meta    map[string]string `json:"meta"`
			}
			_ = json.Unmarshal(n.Params, &params)
			return params.Meta, n.at
		case <-deadline:
			p.t.Fatalf("no channel message within %s:\n%s", within, p.stderr.String())
			return nil, time.Time{}
		}
	}
}

// stopClaudeWay stops the process as Claude Code stops an MCP server:
// SIGINT, SIGTERM 100 ms later, SIGKILL at 500 ms. It returns how long
// the process took to exit after the SIGINT.
func (p *mcpProc) stopClaudeWay() time.Duration {
	p.t.Helper()
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	for _, step := range []struct {
		at  time.Duration
		sig syscall.Signal
	}{{100 * time.Millisecond, syscall.SIGTERM}, {500 * time.Millisecond, syscall.SIGKILL}} {
		select {
		case <-p.exited:
			return time.Since(start)
		case <-time.After(time.Until(start.Add(step.at))):
			_ = p.cmd.Process.Signal(step.sig)
		}
	}
	<-p.exited
	return time.Since(start)
}

// crashClient closes both ends of the client's pipes, as a Claude Code
// that crashed leaves them.
func (p *mcpProc) crashClient() {
	_ = p.stdin.Close()
	_ = p.stdout.Close()
}

// breakStdout closes only the client's reading end of stdout: the next
// write of the server fails with EPIPE (SIGPIPE by default).
func (p *mcpProc) breakStdout() { _ = p.stdout.Close() }

// kill SIGKILLs the process and waits for it.
func (p *mcpProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// waitExit waits for the process to exit and returns its code.
func (p *mcpProc) waitExit(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(within):
		p.t.Fatalf("the process did not exit within %s:\n%s", within, p.stderr.String())
		return -1
	}
}
