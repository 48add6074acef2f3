package console_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/registry"
	_ "github.com/molecule-ai/molecule-relay/internal/relay/embedded" // connect's own NATS, as the binary runs it
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// failingHandler answers every message, except one containing "boom"
// while the file fix does not exist: it then exits 65 (EX_DATAERR), a
// permanent failure, and the message is dead-lettered at once.
const failingHandler = `#!/bin/sh
in=$(cat)
case "$in" in *boom*) [ -f "$0.fixed" ] || { echo "cannot handle boom" >&2; exit 65; } ;; esac
echo "answered"
`

// The console in a real browser (headless Chromium, driven with the
// keyboard) while connect's Runtime runs on the embedded NATS against
// the platform double: the overview shows the event stream connected; a
// message answered before the page opened is in the flow; a message appears in the flow within 1 s of its
// arrival on the inbound stream and its timeline shows it answered; a
// message the handler refuses shows as a dead letter, is replayed (with
// a confirmation) once the handler is fixed, and is answered; another is
// selected and purged; a conversation is opened and forgotten; the MCP
// view shows which session holds the channel and which waits; every
// view passes axe-core with no serious or critical violation.
func TestConsoleInBrowserShowsFlowAndReplaysDeadLetter(t *testing.T) {
	exe := chromium(t)
	axe := axeSource(t)

	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("agent")
	script := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(script, []byte(failingHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	const token = "console-test-token"
	rt, url := runRelayWithConsole(t, token, nil,
		"MOLECULE_PLATFORM_URL="+srv.URL(), "MOLECULE_WORKSPACE_ID="+ws.ID, "MOLECULE_WORKSPACE_TOKEN="+ws.Token,
		"MOLECULE_HANDLER=exec:"+script, "NATS_STORE_DIR="+t.TempDir())
	// Registered in poll mode first: the stream opens beside the first
	// cycle, and before the registration the double takes a message for
	// push delivery (202).
	pipelinetest.Eventually(t, 15*time.Second, "the poller's registration and event stream", func() bool {
		if srv.Status(ws.ID).DeliveryMode != "poll" {
			return false
		}
		for _, r := range srv.Requests() {
			if r.Method == "GET" && strings.HasSuffix(r.Path, "/events/stream") {
				return true
			}
		}
		return false
	})

	// A message answered before any page opens: the flow shows it when
	// one does (read back from the records).
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "before the page"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	pipelinetest.Eventually(t, 15*time.Second, "the first message answered", func() bool { return len(srv.Notifications(ws.ID)) == 1 })

	ctx := browser(t, exe)
	axeCounts := map[string]int{}
	// check runs axe-core on the page as it is, and looks for the
	// workspace's and the console's tokens in it: never shown.
	check := func(where string) {
		for k, v := range checkAccessibility(t, ctx, axe, where) {
			axeCounts[k] += v
		}
		html := value(t, ctx, "page of "+where, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if strings.Contains(html, ws.Token) || strings.Contains(html, token) {
			t.Errorf("%s: the page shows a token", where)
		}
	}

	// Sign in with the keyboard.
	run(t, ctx, "login page", chromedp.Navigate(url+"login"), chromedp.WaitVisible(chromedp.CSS("#token")))
	check("login")
	run(t, ctx, "sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#view-overview")))
	run(t, ctx, "overview", waitJS(`document.querySelector("#overview-table tbody").textContent.includes("`+ws.ID+`")`))
	// The event stream is connected once it delivered an event (the
	// platform echoes every heartbeat).
	run(t, ctx, "event stream connected", waitJS(`document.querySelector("#overview-table tbody").textContent.includes("connected since")`))
	overview := text(t, ctx, "#overview-table tbody")
	if !contains(overview, ws.ID, "ok", "yes (poll)", "connected since", "last event") {
		t.Errorf("overview: %q, want the workspace polled and registered, its event stream connected", overview)
	}
	check("overview")
	screenshot(t, ctx, "overview")

	// A message appears in the flow, live.
	run(t, ctx, "flow", view("flow"), waitJS(`document.querySelector("#flow-status").textContent.startsWith("Live")`),
		waitJS(`document.querySelectorAll("#flow-table tr[data-key]").length === 1`))
	before := value(t, ctx, "the message from before the page", chromedp.Evaluate[string](`document.querySelector("#flow-table tr[data-key]").dataset.key`))
	if st := text(t, ctx, "#flow-table tr[data-key] td:nth-child(5)"); st != "answered" {
		t.Errorf("the message answered before the page opened shows %q", st)
	}
	sent := time.Now()
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "hello console"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	type flowRow struct {
		Key, Shown, Polled string
	}
	row := value(t, ctx, "message in the flow", poll[flowRow](`(() => { const r = document.querySelector('#flow-table tr[data-key]:not([data-key="`+before+`"])');
		return r && {Key: r.dataset.key, Shown: r.dataset.shownAt, Polled: r.dataset.polledAt}; })()`))
	shown := unixMS(t, row.Shown)
	polled, err := time.Parse(time.RFC3339Nano, row.Polled)
	if err != nil {
		t.Fatalf("polled_at %q: %v", row.Polled, err)
	}
	arrival := shown.Sub(polled)
	t.Logf("arrival (the poller's publish) to appearance in the console: %s; the platform's acceptance of the message to appearance: %s",
		arrival.Round(time.Millisecond), shown.Sub(sent).Round(time.Millisecond))
	if arrival > time.Second {
		t.Errorf("the message appeared %s after its arrival, want within 1 s", arrival)
	}
	activity := row.Key[strings.Index(row.Key, "/")+1:]
	run(t, ctx, "timeline",
		waitJS(`document.querySelector('#flow-table tr[data-key$="/`+activity+`"] td:nth-child(5)').textContent === "answered"`),
		press(`#flow-table tr[data-key$="/`+activity+`"] button`, kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#timeline")),
		waitJS(`document.querySelector("#timeline-steps").textContent.includes("answered by")`))
	tl := text(t, ctx, "#timeline-steps")
	if !contains(tl, "polled and published", "handler finished: replied", "answered by notify") {
		t.Errorf("timeline %q: want the poll, the handler's run and the answer", tl)
	}
	run(t, ctx, "reveal", press("#timeline-reveal", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#timeline-body")))
	body := text(t, ctx, "#timeline-body")
	if !contains(body, "hello console", "answered") {
		t.Errorf("revealed body %q", body)
	}
	check("flow with a timeline")
	screenshot(t, ctx, "flow")

	// A dead letter, replayed once the handler is fixed, is answered.
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "boom please"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	run(t, ctx, "dead letter in the flow", waitJS(`[...document.querySelectorAll("#flow-table td")].some(td => td.textContent === "dead letter")`))
	run(t, ctx, "dead letters", view("dlq"), chromedp.WaitVisible(chromedp.CSS("#dlq-table tbody tr[data-seq]")))
	dead := text(t, ctx, "#dlq-table tbody")
	if !contains(dead, "dispatcher", "permanent_error") || strings.Contains(dead, "boom please") {
		t.Errorf("dead letters %q: want the dispatcher's permanent error, without the message", dead)
	}
	run(t, ctx, "inspect", press("#dlq-table tbody tr[data-seq] button", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#dlq-detail")))
	check("dead letters")
	screenshot(t, ctx, "dead-letters")
	if err := os.WriteFile(script+".fixed", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "replay with confirmation",
		press(`#dlq-table tbody tr[data-seq] button[data-action]`, kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter), // Cancel has the focus; Tab moves to Confirm
		waitJS(`document.querySelector("#toast").textContent.startsWith("Replayed")`))
	run(t, ctx, "replayed message answered", view("flow"),
		waitJS(`[...document.querySelectorAll("#flow-table tr[data-key]")].filter(r => r.children[4].textContent === "answered").length === 3`))
	pipelinetest.Eventually(t, 10*time.Second, "the replayed message's answer on the platform", func() bool {
		return len(srv.Notifications(ws.ID)) == 3
	})

	// Another dead letter, selected with the space bar and purged.
	if err := os.Remove(script + ".fixed"); err != nil {
		t.Fatal(err)
	}
	if code, _, err := srv.SendCanvas(context.Background(), ws.ID, "boom again"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	run(t, ctx, "second dead letter", waitJS(`[...document.querySelectorAll("#flow-table td")].some(td => td.textContent === "dead letter")`),
		view("dlq"), chromedp.WaitVisible(chromedp.CSS("#dlq-table tbody tr[data-seq]")),
		press("#dlq-table tbody tr[data-seq] input.pick", " "), waitJS(`document.querySelector("#dlq-table tbody tr[data-seq] input.pick").checked`),
		press("#dlq-purge", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter),
		waitJS(`document.querySelector("#toast").textContent.startsWith("Purged")`),
		waitJS(`!document.querySelector("#dlq-table tbody tr[data-seq]")`))

	// The conversation's memory: its turns without their texts, then
	// forgotten, confirmed with the keyboard.
	run(t, ctx, "conversation", view("conversations"), chromedp.WaitVisible(chromedp.CSS("#conv-list button")),
		press("#conv-list button", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#conv-detail")),
		waitJS(`document.querySelectorAll("#conv-turns tbody tr").length >= 2`))
	if turns := text(t, ctx, "#conv-turns tbody"); !contains(turns, "user", "agent") || strings.Contains(turns, "hello console") {
		t.Errorf("conversation turns %q: want the user's and the agent's, without their texts", turns)
	}
	check("conversations")
	screenshot(t, ctx, "conversations")
	run(t, ctx, "forget with confirmation", press("#conv-forget", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter), waitJS(`document.querySelector("#toast").textContent === "Forgotten"`))

	value(t, ctx, "clear the toast", chromedp.Evaluate[string](`document.querySelector("#toast").textContent = ""`))
	// Two mcp sessions on the workspace, as two Claude Code windows
	// would be: one holds the channel, the other waits for it.
	lease, err := kvlease.Acquire(pipelinetest.Ctx(t), rt.Conn.JS, []string{ws.ID}, kvlease.Config{Bucket: events.BucketMCPLeases, Instance: "claude-window-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Release)
	leases, err := rt.Conn.JS.KeyValue(pipelinetest.Ctx(t), events.BucketMCPLeases)
	if err != nil {
		t.Fatal(err)
	}
	unmark, err := kvlease.MarkWaiting(pipelinetest.Ctx(t), leases, []string{ws.ID}, "claude-window-2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unmark)
	// This relay does not follow the workspace registry: the Workspaces
	// view says how to turn it on and offers no change.
	run(t, ctx, "workspaces, registry off", view("workspaces"), chromedp.WaitVisible(chromedp.CSS("#view-workspaces[data-loaded]")))
	if note := text(t, ctx, "#ws-note"); !contains(note, "registry is off", "MOLECULE_WORKSPACE_REGISTRY=true", "MOLECULE_REGISTRY_KEY_FILE") {
		t.Errorf("workspaces view without the registry: %q, want how to turn it on", note)
	}
	if shown := value(t, ctx, "the add form", chromedp.Evaluate[bool](`!document.querySelector("#ws-add").hidden`)); shown {
		t.Errorf("workspaces view without the registry offers the add form")
	}
	check("workspaces, registry off")
	for _, v := range []string{"delegations", "mcp", "nats"} {
		run(t, ctx, v, view(v), chromedp.WaitVisible(chromedp.CSS("#view-"+v+"[data-loaded]")))
		check(v)
		screenshot(t, ctx, v)
		if mcp := text(t, ctx, "#mcp-table tbody"); v == "mcp" && !contains(mcp, "claude-window-1", "holds the channel", "claude-window-2", "waits since") {
			t.Errorf("MCP sessions %q: want the holder and the waiting session", mcp)
		}
	}
	t.Logf("axe-core %s on the login page, 8 views and the open timeline, dead letter and conversation: violations by impact %v (serious and critical fail the test)", axeVersion, axeCounts)
}

func unixMS(t *testing.T, s string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("shown at %q: %v", s, err)
	}
	return time.UnixMilli(n)
}

// The Workspaces view in a real browser, driven by keyboard, while
// connect's Runtime follows the workspace registry on its embedded NATS
// against the platform double: a workspace added in the form (its token
// typed into a password field, cleared after) is listed, polled and its
// message answered; adding it again shows the refusal in the view in
// plain words; it is paused and resumed; a second one is removed after
// the confirmation. axe-core finds no violation of any impact in the
// view, and no page holds a token.
func TestConsoleInBrowserChangesTheWorkspaceRegistry(t *testing.T) {
	exe := chromium(t)
	axe := axeSource(t)
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	_, keyB64, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const token = "console-test-token"
	_, url := runRelayWithConsole(t, token, nil,
		"MOLECULE_WORKSPACE_REGISTRY=true", "MOLECULE_REGISTRY_KEY="+keyB64,
		"MOLECULE_PLATFORM_URL="+srv.URL(), "MOLECULE_HANDLER=echo", "NATS_STORE_DIR="+t.TempDir())
	first, second := srv.CreateWorkspace("first"), srv.CreateWorkspace("second")

	ctx := browser(t, exe)
	check := func(where string) {
		if counts := checkAccessibility(t, ctx, axe, where); len(counts) != 0 {
			t.Errorf("%s: axe-core violations by impact %v, want none", where, counts)
		}
		html := value(t, ctx, "page of "+where, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if strings.Contains(html, first.Token) || strings.Contains(html, second.Token) || strings.Contains(html, token) {
			t.Errorf("%s: the page shows a token", where)
		}
	}
	run(t, ctx, "sign in", chromedp.Navigate(url+"login"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#view-overview")))
	run(t, ctx, "workspaces", view("workspaces"), chromedp.WaitVisible(chromedp.CSS("#ws-add")),
		waitJS(`document.querySelector("#ws-table tbody").textContent.includes("No workspace in the registry yet")`))
	add := func(ws moleculetest.Workspace) {
		t.Helper()
		run(t, ctx, "add "+ws.ID,
			chromedp.SendKeys(chromedp.CSS(`#ws-add [name="id"]`), ws.ID),
			chromedp.SendKeys(chromedp.CSS(`#ws-add [name="platform_url"]`), srv.URL()),
			chromedp.SendKeys(chromedp.CSS(`#ws-add [name="token"]`), ws.Token),
			press(`#ws-add button[type="submit"]`, kb.Enter))
	}
	sent := time.Now()
	add(first)
	run(t, ctx, "added", waitJS(`document.querySelector('#ws-table tr[data-ws="`+first.ID+`"]')`),
		waitJS(`document.querySelector("#toast").textContent === "Added `+first.ID+`"`))
	if v := value(t, ctx, "token field", chromedp.Evaluate[string](`document.querySelector('#ws-add [name="token"]').value`)); v != "" {
		t.Errorf("the token field still holds %d characters after the add", len(v))
	}
	pipelinetest.Eventually(t, 5*time.Second, "a poll of the added workspace, registered in poll mode", func() bool {
		if srv.Status(first.ID).DeliveryMode != "poll" {
			return false
		}
		for _, r := range srv.Requests() {
			if r.Header.Get("Authorization") == "Bearer "+first.Token && r.At.After(sent) {
				return true
			}
		}
		return false
	})
	if code, _, err := srv.SendCanvas(context.Background(), first.ID, "hello registry"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	pipelinetest.Eventually(t, 10*time.Second, "the added workspace's message answered", func() bool { return len(srv.Notifications(first.ID)) == 1 })

	add(first) // again: refused, in the view
	run(t, ctx, "refusal shown", chromedp.WaitVisible(chromedp.CSS("#ws-error")))
	if msg := text(t, ctx, "#ws-error"); !contains(msg, first.ID+" is already in the registry", "remove it and add it again") {
		t.Errorf("refusal %q: want what is wrong and what to do", msg)
	}
	check("workspaces with a refusal")
	value(t, ctx, "clear the form", chromedp.Evaluate[*runtime.RemoteObject](`document.querySelector("#ws-add").reset()`))
	add(second)
	run(t, ctx, "second added", waitJS(`document.querySelector('#ws-table tr[data-ws="`+second.ID+`"]')`), waitJS(`document.querySelector("#ws-error").hidden`))
	row := func(ws moleculetest.Workspace) string { return `#ws-table tr[data-ws="` + ws.ID + `"]` }
	run(t, ctx, "pause", press(row(second)+" button", kb.Enter),
		waitJS(`document.querySelector('`+row(second)+` td:nth-child(4)').textContent === "paused"`))
	check("workspaces")
	screenshot(t, ctx, "workspaces")
	run(t, ctx, "resume", press(row(second)+" button", kb.Enter),
		waitJS(`document.querySelector('`+row(second)+` td:nth-child(4)').textContent === "active"`))
	run(t, ctx, "remove, cancelled", press(row(second)+" button.danger", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.KeyEvent(kb.Enter), // Cancel has the focus
		waitJS(`document.querySelector("#toast").textContent === "Remove cancelled"`))
	run(t, ctx, "remove, confirmed", press(row(second)+" button.danger", kb.Enter), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter),
		waitJS(`!document.querySelector('`+row(second)+`')`), waitJS(`document.querySelector('`+row(first)+`')`))
}
