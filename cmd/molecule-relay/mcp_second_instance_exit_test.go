package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// jsonOnly passes writes on and records any that is not one JSON-RPC
// message: stdout is the protocol, logs must go to stderr.
type jsonOnly struct {
	w   io.Writer
	mu  sync.Mutex
	bad []string
}

func (j *jsonOnly) Write(p []byte) (int, error) {
	var m struct {
		JSONRPC string `json:"jsonrpc"`
	}
	if json.Unmarshal(bytes.TrimSpace(p), &m) != nil || m.JSONRPC != "2.0" {
		j.mu.Lock()
		j.bad = append(j.bad, string(p))
		j.mu.Unlock()
	}
	return j.w.Write(p)
}

// molecule-relay mcp speaks MCP on stdout (nothing else is written there)
// and a second mcp command --no-wait on the same workspace exits 3 with a
// message naming the cause, while the first keeps serving; the first exits
// 0 when its client closes stdin.
func TestMCPSecondInstanceExitsBusy(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	environ := []string{
		"MOLECULE_PLATFORM_URL=" + w.Plat.URL(), "MOLECULE_WORKSPACE_ID=" + w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token, "NATS_URL=" + w.NATSURL(),
		"MOLECULE_POLL_INTERVAL=100ms", "MOLECULE_LOG_LEVEL=debug",
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stdout := &jsonOnly{w: outW}
	var stderr pipelinetest.LogBuffer
	first := make(chan int, 1)
	go func() {
		first <- run(context.Background(), &cliEnv{stdin: inR, stdout: stdout, stderr: &stderr, environ: environ}, []string{"mcp"})
		_ = outW.Close()
	}()
	c := client.NewClient(transport.NewIO(outR, inW, nil))
	ctx := pipelinetest.Ctx(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Initialize(ctx, mcp.InitializeRequest{})
	if err != nil {
		t.Fatalf("initialize: %v\n%s", err, stderr.String())
	}
	if _, ok := res.Capabilities.Experimental[mcpchannel.Capability]; !ok {
		t.Fatalf("no %s capability", mcpchannel.Capability)
	}
	kv, err := w.Obs.JS.KeyValue(ctx, events.BucketMCPLeases)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, w.Agent.ID); err != nil {
		t.Fatalf("the serving instance holds no lease: %v", err)
	}

	var out2, err2 bytes.Buffer
	code := run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: &out2, stderr: &err2, environ: environ}, []string{"mcp", "--no-wait"})
	if code != exitBusy || !strings.Contains(err2.String(), "another molecule-relay mcp instance serves this workspace") || out2.Len() != 0 {
		t.Fatalf("second instance: exit %d, stdout %q, stderr:\n%s", code, out2.String(), err2.String())
	}

	_ = c.Close()
	select {
	case code := <-first:
		if code != exitOK {
			t.Fatalf("first instance exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("first instance did not exit after its client closed stdin")
	}
	if len(stdout.bad) > 0 {
		t.Fatalf("non-protocol output on stdout: %q", stdout.bad)
	}
	if _, err := kv.Get(ctx, w.Agent.ID); err == nil {
		t.Fatal("the lease was not released on exit")
	}
}
