package mcpchannel_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// newRelay starts an mcp relay (poller and replier running, no client) on
// w's agent workspace, against w's NATS and platform double.
func newRelay(t *testing.T, w *pipelinetest.World, lease mcpchannel.LeaseConfig) (*mcpchannel.Relay, error) {
	t.Helper()
	return newRelayLogged(t, w, lease, pipelinetest.Logger())
}

// newRelayLogged is newRelay logging to log.
func newRelayLogged(t *testing.T, w *pipelinetest.World, lease mcpchannel.LeaseConfig, log *slog.Logger) (*mcpchannel.Relay, error) {
	t.Helper()
	rt, err := relay.Open(pipelinetest.Ctx(t), mcpConfig(t, w), log)
	if err != nil {
		t.Fatalf("relay.Open: %v", err)
	}
	t.Cleanup(rt.Close)
	r, err := mcpchannel.Start(pipelinetest.Ctx(t), rt, lease)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, nil
}

// mcpConfig is the configuration of an mcp relay on w's agent workspace.
func mcpConfig(t *testing.T, w *pipelinetest.World) *config.Config {
	t.Helper()
	cfg, err := config.Load(nil, []string{
		"MOLECULE_PLATFORM_URL=" + w.Plat.URL(), "MOLECULE_WORKSPACE_ID=" + w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token, "MOLECULE_POLL_INTERVAL=100ms",
		"MOLECULE_MCP_ANSWER_TIMEOUT=2m", "NATS_URL=" + w.NATSURL(),
		"MOLECULE_FILES_DIR=" + t.TempDir(),
	})
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startRelay(t *testing.T, w *pipelinetest.World) *mcpchannel.Relay {
	t.Helper()
	r, err := newRelay(t, w, mcpchannel.LeaseConfig{})
	if err != nil {
		t.Fatalf("mcpchannel.Start: %v", err)
	}
	w.WaitSeeded(w.Agent.ID)
	return r
}

// claude plays Claude Code: an MCP client over real pipes to Relay.Serve.
type claude struct {
	t      *testing.T
	c      *client.Client
	init   *mcp.InitializeResult
	notes  chan mcpchannel.Notification
	toSrv  *io.PipeWriter
	served chan error
}

// connect runs Serve for a new client and completes the handshake.
func connect(t *testing.T, r *mcpchannel.Relay) *claude {
	t.Helper()
	inR, inW := io.Pipe()   // client → server
	outR, outW := io.Pipe() // server → client
	cl := &claude{t: t, notes: make(chan mcpchannel.Notification, 64), toSrv: inW, served: make(chan error, 1)}
	go func() {
		err := r.Serve(context.Background(), inR, outW)
		_ = outW.Close()
		_ = inR.Close()
		cl.served <- err
	}()
	cl.c = client.NewClient(transport.NewIO(outR, inW, nil))
	cl.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != mcpchannel.Method {
			return
		}
		b, _ := json.Marshal(n.Params.AdditionalFields)
		var note mcpchannel.Notification
		if err := json.Unmarshal(b, &note); err != nil {
			t.Errorf("channel notification params: %v (%s)", err, b)
		}
		cl.notes <- note
	})
	ctx := pipelinetest.Ctx(t)
	if err := cl.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "claude-code-test", Version: "0"}
	res, err := cl.c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	cl.init = res
	t.Cleanup(cl.disconnect)
	return cl
}

// next waits for the next channel notification.
func (cl *claude) next(within time.Duration) mcpchannel.Notification {
	cl.t.Helper()
	select {
	case n := <-cl.notes:
		return n
	case <-time.After(within):
		cl.t.Fatalf("no channel notification within %s", within)
		return mcpchannel.Notification{}
	}
}

// call calls a tool; isError reports a tool-level error.
func (cl *claude) call(name string, args map[string]any) (text string, isError bool) {
	cl.t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := cl.c.CallTool(pipelinetest.Ctx(cl.t), req)
	if err != nil {
		cl.t.Fatalf("tools/call %s: %v", name, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return text, res.IsError
}

// disconnect closes the client's side, as Claude Code exiting would, and
// waits for Serve to return.
func (cl *claude) disconnect() {
	_ = cl.c.Close()
	_ = cl.toSrv.Close()
	select {
	case err := <-cl.served:
		if err != nil {
			cl.t.Errorf("Serve: %v", err)
		}
		cl.served <- nil // later calls return at once
	case <-time.After(30 * time.Second):
		cl.t.Error("Serve did not return after the client closed")
	}
}
