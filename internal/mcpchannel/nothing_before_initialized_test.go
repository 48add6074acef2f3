package mcpchannel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Claude Code drops notifications that arrive mid-handshake: a message
// already queued is not shown (not even taken from the queue) until the
// client's notifications/initialized, and is shown right after it. Raw
// JSON-RPC lines, so the order on the wire is what is checked.
func TestNothingShownBeforeInitialized(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	r := startRelay(t, w)
	w.SendCanvas("early message")
	pipelinetest.Eventually(t, 20*time.Second, "message stored", func() bool {
		in, _ := w.Queued()
		return in == 1
	})

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- r.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	lines := bufio.NewReader(outR)
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	type msg struct {
		ID     *int            `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Params json.RawMessage `json:"params"`
	}
	read := func() msg {
		t.Helper()
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var m msg
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("not JSON-RPC on stdout: %q", line)
		}
		return m
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if m := read(); m.ID == nil || *m.ID != 1 {
		t.Fatalf("first line is not the initialize result: %+v", m)
	} else {
		var res struct {
			Capabilities struct {
				Experimental map[string]json.RawMessage `json:"experimental"`
			} `json:"capabilities"`
		}
		if err := json.Unmarshal(m.Result, &res); err != nil || string(res.Capabilities.Experimental[mcpchannel.Capability]) != "{}" {
			t.Fatalf("initialize result %s: experimental[%q] should be {}", m.Result, mcpchannel.Capability)
		}
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := read(); m.ID == nil || *m.ID != 2 {
		t.Fatalf("a line before the tools/list result: %+v", m)
	}
	info, err := w.Obs.Topo.Dispatcher.Info(pipelinetest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 1 || r.Channel().Waiting() != 0 {
		t.Fatalf("before initialized: pending %d, ack pending %d, waiting %d; want the message still queued",
			info.NumPending, info.NumAckPending, r.Channel().Waiting())
	}

	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	m := read()
	var n mcpchannel.Notification
	if m.Method != mcpchannel.Method || json.Unmarshal(m.Params, &n) != nil || n.Meta["activity_id"] != w.SentText("early message").ActivityID {
		t.Fatalf("after initialized: %+v", m)
	}
	_ = inW.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
