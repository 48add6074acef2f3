package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// mcpWorld is a platform double with one workspace and the environment an
// mcp process needs. By default the sessions share one store, as Claude
// Code sessions started in one project directory do.
type mcpWorld struct {
	t       *testing.T
	plat    *moleculetest.Server
	ws      moleculetest.Workspace
	environ []string
}

func newMCPWorld(t *testing.T, extra ...string) *mcpWorld {
	t.Helper()
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("claude")
	environ := append([]string{
		"MOLECULE_PLATFORM_URL=" + plat.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "NATS_STORE_DIR=" + t.TempDir(),
		"MOLECULE_LOG_LEVEL=debug",
	}, extra...)
	return &mcpWorld{t: t, plat: plat, ws: ws, environ: environ}
}

// sendCanvas sends a canvas message, once the workspace is registered in
// poll mode (by the first session).
func (w *mcpWorld) sendCanvas(text string) {
	w.t.Helper()
	pipelinetest.Eventually(w.t, 10*time.Second, "the workspace registered in poll mode", func() bool {
		return w.plat.Status(w.ws.ID).DeliveryMode == "poll"
	})
	if code, body, err := w.plat.SendCanvas(context.Background(), w.ws.ID, text); err != nil || code != 200 {
		w.t.Fatalf("send: %d %s %v", code, body, err)
	}
}

// session starts an mcp process and completes the handshake.
func (w *mcpWorld) session() *mcpProc {
	w.t.Helper()
	p := startMCP(w.t, w.environ)
	p.initialize()
	return p
}

// answer replies to a shown message.
func (p *mcpProc) answer(meta map[string]string) {
	p.t.Helper()
	if txt, isErr := p.callTool("reply_to_workspace", map[string]any{"activity_id": meta["activity_id"], "text": "ok"}); isErr {
		p.t.Fatalf("reply: %s", txt)
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// takeoverWithin is the promise: however a session ended, the next one
// started right after receives a new message within it.
const takeoverWithin = 3 * time.Second

// Every way a session ends, five times each: the next session, started
// right after, receives a message sent at the moment the old one ended
// within 3 s. Claude Code's own stop (SIGINT, SIGTERM at +100 ms, SIGKILL
// at +500 ms) ends a connected channel with exit 0 before the SIGTERM.
// A client that vanishes (both pipes closed, or only stdout) ends the
// session with exit 0, never SIGPIPE (141). A SIGKILLed session leaves its
// lease behind: on the shared store the next session takes it over at
// once (the store's lock proves the holder dead); on a shared NATS server
// it waits for the lease to expire (2 s).
func TestMCPNextSessionReceivesWithin3sHoweverTheLastEnded(t *testing.T) {
	type end struct {
		name string
		// end ends p; it returns when the session is over, and the exit
		// code the process must have had (-1: do not check).
		end  func(p *mcpProc) int
		nats bool // a shared NATS server instead of a shared store
	}
	claudeStop := func(p *mcpProc) int {
		d := p.stopClaudeWay()
		if d >= 100*time.Millisecond {
			t.Logf("stop took %s (after the SIGTERM)", d)
		}
		return 0
	}
	kill := func(p *mcpProc) int { p.kill(); return -1 }
	crash := func(p *mcpProc) int { p.crashClient(); p.waitExit(5 * time.Second); return 0 }
	for _, tc := range []end{
		{"Claude Code stop", claudeStop, false},
		{"SIGKILL", kill, false},
		{"client crashed", crash, false},
		{"Claude Code stop, shared NATS", claudeStop, true},
		{"SIGKILL, shared NATS", kill, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var extra []string
			if tc.nats {
				extra = append(extra, "NATS_URL="+natstest.Start(t).ClientURL())
			}
			w := newMCPWorld(t, extra...)
			p := w.session()
			w.sendCanvas("warm-up")
			meta, _ := p.nextMessage(20 * time.Second)
			p.answer(meta)
			var takeovers []time.Duration
			for i := range 5 {
				want := tc.end(p)
				ended := time.Now()
				if want >= 0 && p.code != want {
					t.Fatalf("round %d: exit %d, want %d:\n%s", i, p.code, want, p.stderr.String())
				}
				w.sendCanvas(fmt.Sprintf("round %d", i))
				p = w.session()
				meta, at := p.nextMessage(20 * time.Second)
				takeovers = append(takeovers, at.Sub(ended))
				p.answer(meta)
			}
			t.Logf("%s: session end → next session's first message %v, median %s", tc.name, takeovers, median(takeovers))
			if m := median(takeovers); m > takeoverWithin {
				t.Fatalf("median takeover %s, want under %s", m, takeoverWithin)
			}
		})
	}
}

// The stop time Claude Code sees: SIGINT with a client connected and
// nothing in flight ends the process with exit 0 (a SIGTERM arriving
// meanwhile changes nothing), well inside the 100 ms before Claude's
// SIGTERM (the median of five is checked, except when the tests run
// under the race detector, whose load on the machine is not the user's;
// each is logged).
func TestMCPExitsWithin100msOfSIGINT(t *testing.T) {
	w := newMCPWorld(t)
	var stops []time.Duration
	for range 5 {
		p := w.session()
		if _, isErr := p.callTool("list_peers", nil); isErr {
			t.Logf("list_peers failed (not needed here)")
		}
		d := p.stopClaudeWay()
		if p.code != 0 {
			t.Fatalf("exit %d after %s:\n%s", p.code, d, p.stderr.String())
		}
		stops = append(stops, d)
	}
	t.Logf("SIGINT → exit: %v, median %s (race detector %v)", stops, median(stops), raceEnabled)
	if m := median(stops); m >= 100*time.Millisecond && !raceEnabled {
		t.Fatalf("median stop %s, want under 100 ms", m)
	}
}

// A client whose end of stdout is gone (it crashed, or closed the pipe)
// makes the next write fail with EPIPE: the session ends with exit 0, not
// SIGPIPE, and the message that could not be shown is shown to the next
// session.
func TestMCPBrokenStdoutEndsSessionWithoutSIGPIPE(t *testing.T) {
	w := newMCPWorld(t)
	p := w.session()
	p.breakStdout()
	w.sendCanvas("into a closed pipe")
	if code := p.waitExit(10 * time.Second); code != 0 {
		t.Fatalf("exit %d (141 is SIGPIPE), want 0:\n%s", code, p.stderr.String())
	}
	next := w.session()
	meta, _ := next.nextMessage(20 * time.Second)
	next.answer(meta)
}

// A message shown to a session that ended without answering it is shown
// again, once, in the next session: handed back at once by a stop, after
// the consumer's AckWait (8 s) when the session was SIGKILLed.
func TestMCPUnansweredMessageShownOnceInNextSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*mcpProc)
	}{
		{"Claude Code stop", func(p *mcpProc) { p.stopClaudeWay() }},
		{"SIGKILL", func(p *mcpProc) { p.kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newMCPWorld(t)
			p := w.session()
			w.sendCanvas("unanswered")
			first, _ := p.nextMessage(20 * time.Second)
			tc.end(p)
			next := w.session()
			again, _ := next.nextMessage(30 * time.Second)
			if again["activity_id"] != first["activity_id"] {
				t.Fatalf("next session shown %s first, want the unanswered %s", again["activity_id"], first["activity_id"])
			}
			next.answer(again)
			w.sendCanvas("after")
			after, _ := next.nextMessage(20 * time.Second)
			if after["activity_id"] == first["activity_id"] {
				t.Fatalf("the answered message %s was shown a third time", first["activity_id"])
			}
			next.answer(after)
			pipelinetest.Eventually(t, 10*time.Second, "two replies", func() bool { return len(w.plat.Notifications(w.ws.ID)) == 2 })
		})
	}
}

// A second session while a live one holds the channel does not fail: it
// completes the handshake, lists the tools, says in its instructions and
// its tool results that another session holds the channel, delivers
// nothing, and takes over by itself when the first one ends.
func TestMCPSecondSessionWaitsAndTakesOver(t *testing.T) {
	for _, shared := range []string{"store", "NATS"} {
		t.Run(shared, func(t *testing.T) {
			var extra []string
			if shared == "NATS" {
				extra = append(extra, "NATS_URL="+natstest.Start(t).ClientURL())
			}
			w := newMCPWorld(t, extra...)
			first := w.session()
			w.sendCanvas("to the first")
			m, _ := first.nextMessage(20 * time.Second)
			first.answer(m)

			second := startMCP(t, w.environ)
			res := second.initialize()
			if instr, _ := res["instructions"].(string); !strings.Contains(instr, "another") || !strings.Contains(instr, w.ws.ID) {
				t.Fatalf("instructions do not say another session holds the channel: %q", instr)
			}
			var tools struct {
				Result struct {
					Tools []struct{ Name string } `json:"tools"`
				} `json:"result"`
			}
			if err := json.Unmarshal(second.request("tools/list", map[string]any{}, 10*time.Second), &tools); err != nil || len(tools.Result.Tools) < 12 {
				t.Fatalf("tools/list: %v %+v", err, tools)
			}
			for _, tool := range []string{"list_peers", "reply_to_workspace", "send_message_to_user"} {
				if txt, isErr := second.callTool(tool, map[string]any{"text": "x", "message": "x"}); !isErr || !strings.Contains(txt, "another") {
					t.Fatalf("%s in the waiting session: %q (error %v), want it to say another session holds the channel", tool, txt, isErr)
				}
			}
			if !strings.Contains(second.stderr.String(), "another session holds the channel") {
				t.Fatalf("no log line saying another session holds the channel:\n%s", second.stderr.String())
			}
			w.sendCanvas("still the first's")
			m, _ = first.nextMessage(20 * time.Second)
			first.answer(m)

			first.stopClaudeWay()
			ended := time.Now()
			w.sendCanvas("to the second")
			m, at := second.nextMessage(20 * time.Second)
			t.Logf("first session's end → the waiting session's first message: %s", at.Sub(ended))
			if at.Sub(ended) > takeoverWithin {
				t.Fatalf("the waiting session took %s to take over", at.Sub(ended))
			}
			second.answer(m)
			if txt, isErr := second.callTool("list_peers", nil); isErr {
				t.Fatalf("list_peers after the takeover: %s", txt)
			}
		})
	}
}

// With --no-wait a second session on the shared store exits 3, naming the
// workspace and the cause.
func TestMCPNoWaitSecondSessionOnSharedStoreExitsBusy(t *testing.T) {
	w := newMCPWorld(t)
	w.session()
	second := startMCP(t, w.environ, "--no-wait")
	code := second.waitExit(20 * time.Second)
	msg := second.stderr.String()
	if code != exitBusy || !strings.Contains(msg, w.ws.ID) || !strings.Contains(msg, "another molecule-relay mcp instance serves this workspace") ||
		!strings.Contains(msg, "is in use by another process") {
		t.Fatalf("exit %d, want %d naming the workspace and the locked store:\n%s", code, exitBusy, msg)
	}
}

// A waiting second session stopped the Claude way exits 0 at once, and
// the session holding the channel keeps it.
func TestMCPWaitingSessionStopsCleanly(t *testing.T) {
	w := newMCPWorld(t)
	first := w.session()
	for range 3 {
		second := w.session()
		if d := second.stopClaudeWay(); second.code != 0 {
			t.Fatalf("waiting session: exit %d after %s:\n%s", second.code, d, second.stderr.String())
		}
	}
	w.sendCanvas("still the first's")
	m, _ := first.nextMessage(20 * time.Second)
	first.answer(m)
}

// The session that has the channel does not say it is waiting.
func TestMCPFirstSessionInstructionsDoNotSayWaiting(t *testing.T) {
	w := newMCPWorld(t)
	for range 3 {
		p := startMCP(t, w.environ)
		if instr, _ := p.initialize()["instructions"].(string); strings.Contains(instr, "does not receive") {
			t.Fatalf("the only session says it waits: %q", instr)
		}
		p.stopClaudeWay()
	}
}
