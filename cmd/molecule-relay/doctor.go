package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay/embedded"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// doctorTimeout bounds each check's request; doctorStreamHold is how long
// the event stream must stay open to count as working.
const (
	doctorTimeout    = 5 * time.Second
	doctorStreamHold = 500 * time.Millisecond
)

// checkMark is a check's outcome: only a failure makes doctor exit 1.
type checkMark string

const (
	markOK   checkMark = "ok  "
	markWarn checkMark = "warn"
	markFail checkMark = "FAIL"
)

// doctorReport prints one line per check and counts the failures.
type doctorReport struct {
	w             io.Writer
	failed, warns int
}

func (r *doctorReport) line(m checkMark, what, format string, a ...any) {
	switch m {
	case markFail:
		r.failed++
	case markWarn:
		r.warns++
	}
	fmt.Fprintf(r.w, "%s  %-14s %s\n", m, what, fmt.Sprintf(format, a...))
}

// runDoctor checks one configuration, the one connect would read, without
// changing anything anywhere: it registers nothing, answers nothing, sends
// no heartbeat, acks nothing and writes no row on the feed; it only reads
// (GET requests, a NATS lookup, the store's lock file). Exit 0 when
// nothing failed, 1 when a check failed (where connect --once would exit
// 1 too: a paused workspace is one), 2 for a configuration that does not
// load.
func runDoctor(ctx context.Context, env *cliEnv, args []string) error {
	cfg, err := parseConfig(env, "doctor", args, config.NeedPlatform, nil)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	rep := checkWorkspaces(ctx, env.stdout, cfg, quiet)
	checkNATS(ctx, rep, cfg, quiet)
	fmt.Fprintf(env.stdout, "\n%d failed, %d warning(s); nothing was registered, answered or written\n", rep.failed, rep.warns)
	if rep.failed > 0 {
		return fmt.Errorf("%d check(s) failed; each FAIL line says what to do", rep.failed)
	}
	return nil
}

// checkWorkspaces checks the workspaces a few at a time (each holds its
// event stream for doctorStreamHold) and prints their reports in order.
func checkWorkspaces(ctx context.Context, out io.Writer, cfg *config.Config, log *slog.Logger) *doctorReport {
	ws := cfg.Workspaces()
	reps := make([]*doctorReport, len(ws))
	bufs := make([]bytes.Buffer, len(ws))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for i, w := range ws {
		reps[i] = &doctorReport{w: &bufs[i]}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			checkWorkspace(ctx, reps[i], cfg, w, log)
		})
	}
	wg.Wait()
	total := &doctorReport{w: out}
	for i := range ws {
		_, _ = bufs[i].WriteTo(out)
		total.failed += reps[i].failed
		total.warns += reps[i].warns
	}
	return total
}

// checkWorkspace runs the platform checks of one workspace, in the order
// each depends on the one before: reachable, token, state, poll mode,
// rate limit, event stream.
func checkWorkspace(ctx context.Context, rep *doctorReport, cfg *config.Config, w config.Workspace, log *slog.Logger) {
	c, err := molecule.New(molecule.Config{
		PlatformURL: w.PlatformURL, WorkspaceID: w.ID, Token: w.Token, OrgID: w.OrgID,
		RequestTimeout: doctorTimeout, MaxRetries: -1, Logger: log,
	})
	if err != nil {
		rep.line(markFail, "platform", "%s: %v; check MOLECULE_PLATFORM_URL", w.PlatformURL, err)
		return
	}
	fmt.Fprintf(rep.w, "workspace %s on %s\n", w.ID, w.PlatformURL)
	info := checkReachable(ctx, rep, c, w)
	if info == nil || !checkToken(ctx, rep, c, registered(info)) {
		return
	}
	checkPollMode(ctx, rep, c, cfg)
	checkRateLimit(rep, c)
	checkEventStream(ctx, rep, c, cfg)
}

// checkReachable reads the unauthenticated GET /workspaces/:id: the
// platform answers, knows the workspace, and it is not removed. It
// returns the answer, nil after a failure.
func checkReachable(ctx context.Context, rep *doctorReport, c *molecule.Client, w config.Workspace) *molecule.WorkspaceInfo {
	start := time.Now()
	info, err := c.Workspace(ctx, w.ID)
	took := time.Since(start).Round(100 * time.Microsecond)
	var netErr *net.OpError
	switch {
	case errors.As(err, &netErr):
		rep.line(markFail, "platform", "unreachable (%v); check MOLECULE_PLATFORM_URL and that this machine reaches it", netErr)
	case errors.Is(err, molecule.ErrTenantRouting):
		rep.line(markFail, "platform", "reachable, but the request was not routed to a tenant (%v); check MOLECULE_PLATFORM_URL, and MOLECULE_ORG_ID on a SaaS tenant", err)
	case errors.Is(err, molecule.ErrNotFound):
		rep.line(markFail, "platform", "reachable, but it has no workspace %s: check MOLECULE_WORKSPACE_ID, and that MOLECULE_PLATFORM_URL is the tenant the workspace is on", w.ID)
	case err != nil && molecule.StatusOf(err) == 0:
		rep.line(markFail, "platform", "unreachable (%v); check MOLECULE_PLATFORM_URL and that this machine reaches it", err)
	case err != nil:
		rep.line(markFail, "platform", "answered HTTP %d: %v; is MOLECULE_PLATFORM_URL the platform's base URL?", molecule.StatusOf(err), err)
	case info.Removed:
		rep.line(markFail, "workspace", "removed on the platform (%s); create a new workspace and token in the canvas and configure those", info.Hint)
	default:
		rep.line(markOK, "platform", "reachable (GET /workspaces/:id %s)", took)
		return info
	}
	return nil
}

// registered says whether an agent ever registered the workspace: the
// register gives it its agent card (enteros-core aeec8e47
// handlers/registry.go:1097-1144), which GET /workspaces/:id returns, null
// until then (handlers/workspace.go:1769).
func registered(info *molecule.WorkspaceInfo) bool {
	var w struct {
		AgentCard json.RawMessage `json:"agent_card"`
	}
	return json.Unmarshal(info.Raw, &w) == nil && len(w.AgentCard) > 0 && string(w.AgentCard) != "null"
}

// checkToken reads GET /workspaces/:id/state with the token, and says what
// the workspace's state means for connect.
func checkToken(ctx context.Context, rep *doctorReport, c *molecule.Client, registered bool) bool {
	st, err := c.State(ctx)
	switch {
	case errors.Is(err, molecule.ErrUnauthorized):
		rep.line(markFail, "token", "refused (HTTP 401): the token is not this workspace's, or was revoked; make a new one in the canvas (Settings → Workspace Tokens) and set MOLECULE_WORKSPACE_TOKEN or _TOKEN_FILE")
		return false
	case errors.Is(err, molecule.ErrWorkspaceRemoved):
		rep.line(markFail, "workspace", "removed on the platform; create a new workspace and token in the canvas")
		return false
	case err != nil:
		rep.line(markFail, "token", "GET /workspaces/:id/state: %v", err)
		return false
	}
	rep.line(markOK, "token", "accepted")
	switch {
	case st.Status == "paused":
		rep.line(markFail, "state", "paused on the platform: connect fetches nothing from it (messages stay queued there) and --once exits 1; resume it in the canvas (a first connect on an empty store registers it, which un-pauses it)")
	case st.Status == "online":
		rep.line(markOK, "state", "online: an agent heartbeated it in the last 90 s; if that is not a relay of this configuration, two clients answer its messages")
	case st.Status == "failed" || st.Status == "degraded":
		rep.line(markWarn, "state", "%s: connect's start registers it, which brings it online", st.Status)
	case registered: // awaiting_agent, offline, provisioning
		rep.line(markOK, "state", "%s, registered before: no agent heartbeats it now; connect registers it again and heartbeats it", st.Status)
	default:
		rep.line(markOK, "state", "%s, never registered (it has no agent card): connect registers it", st.Status)
	}
	return true
}

// checkPollMode probes the platform generation with the zero-UUID cursor
// (410: poll mode; 200: a push-only platform) and reads the newest row:
// a seq on it marks a 2026-08 platform.
func checkPollMode(ctx context.Context, rep *doctorReport, c *molecule.Client, cfg *config.Config) {
	gen, err := c.Probe(ctx)
	switch {
	case err != nil:
		rep.line(markFail, "poll mode", "the probe failed: %v", err)
	case gen == molecule.GenerationOld && cfg.PushListen != "":
		rep.line(markOK, "poll mode", "none (a platform before 2026-05); push mode is configured (MOLECULE_PUSH_LISTEN)")
	case gen == molecule.GenerationOld:
		rep.line(markFail, "poll mode", "none: the platform is older than 2026-05 and delivers by push only; set MOLECULE_PUSH_LISTEN and MOLECULE_PUSH_URL")
	default:
		rep.line(markOK, "poll mode", "yes: %s", generationOf(ctx, c))
	}
}

func generationOf(ctx context.Context, c *molecule.Client) string {
	page, err := c.Activity(ctx, molecule.ActivityQuery{Limit: 1})
	switch {
	case err != nil || len(page.Rows) == 0:
		return "a 2026-05 platform or newer (no row on the feed to tell 2026-08 by)"
	case page.Rows[0].Seq > 0:
		return "a 2026-08 platform or newer (rows carry seq)"
	default:
		return "a 2026-05 platform (rows carry no seq)"
	}
}

// checkRateLimit reports what the platform's X-RateLimit-* headers said.
func checkRateLimit(rep *doctorReport, c *molecule.Client) {
	rl := c.RateLimit()
	switch {
	case !rl.Known:
		rep.line(markOK, "rate limit", "no X-RateLimit headers; the relay paces itself by the 429s it gets")
	case rl.Limit == molecule.RateUnlimited:
		rep.line(markOK, "rate limit", "unlimited (the platform's limiter is off)")
	case rl.Remaining < rl.Limit/10:
		rep.line(markWarn, "rate limit", "%d of %d requests left, the window resets in %s; connect will wait for it", rl.Remaining, rl.Limit, rl.Reset.Round(time.Second))
	default:
		rep.line(markOK, "rate limit", "%d of %d requests left, the window resets in %s", rl.Remaining, rl.Limit, rl.Reset.Round(time.Second))
	}
}

// checkEventStream opens the workspace's event stream and holds it
// briefly: open that long, it works.
func checkEventStream(ctx context.Context, rep *doctorReport, c *molecule.Client, cfg *config.Config) {
	if !cfg.SSE {
		rep.line(markOK, "event stream", "not used (MOLECULE_SSE=false): messages are found by the poll every %s", cfg.PollInterval)
		return
	}
	hold, cancel := context.WithTimeout(ctx, doctorStreamHold)
	defer cancel()
	err := c.StreamEvents(hold, func(molecule.Event) {})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		rep.line(markOK, "event stream", "open (held %s); a message wakes the poller at once", doctorStreamHold)
		return
	}
	rep.line(markWarn, "event stream", "%v; the relay still finds messages by polling every %s (MOLECULE_SSE=false stops trying)", err, cfg.PollInterval)
}

// checkNATS checks the NATS side: an external server and its JetStream,
// or the embedded server's store and who holds it (doctor does not start
// the embedded server: that would take the store).
func checkNATS(ctx context.Context, rep *doctorReport, cfg *config.Config, log *slog.Logger) {
	fmt.Fprintln(rep.w, "NATS")
	if cfg.NATS.Embedded() {
		checkStore(rep, cfg.NATS.StoreDir)
		return
	}
	nc := cfg.NATS
	nc.ConnectTimeout = min(nc.ConnectTimeout, doctorTimeout)
	conn, err := broker.Connect(ctx, nc, log)
	if err != nil {
		rep.line(markFail, "nats", "%v", err)
		return
	}
	defer conn.Close()
	rep.line(markOK, "nats", "connected to %s", conn.URL())
	if _, err := conn.JS.AccountInfo(ctx); err != nil {
		rep.line(markFail, "jetstream", "%v; enable JetStream on the server (nats-server -js) or for this account", err)
		return
	}
	var missing []string
	for _, name := range []string{events.StreamInbound, events.StreamReply, events.StreamDLQ} {
		if _, err := conn.JS.Stream(ctx, name); err != nil {
			missing = append(missing, name)
		}
	}
	switch {
	case len(missing) == 0:
		rep.line(markOK, "jetstream", "on; the relay's streams are there")
	case cfg.Topology == "lookup":
		rep.line(markFail, "jetstream", "on, but %v are missing and MOLECULE_TOPOLOGY=lookup creates nothing: run molecule-relay status once as a user who may create streams", missing)
	default:
		rep.line(markOK, "jetstream", "on; %v not created yet: connect creates them", missing)
	}
}

// checkStore reports the embedded server's store: where it is, and
// whether a running process holds it.
func checkStore(rep *doctorReport, dir string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		rep.line(markOK, "store", "embedded server, store %s: not created yet; connect creates it", abs)
		return
	}
	pid, held, err := embedded.StoreHolder(abs)
	switch {
	case err != nil:
		rep.line(markFail, "store", "embedded server, store %s: %v", abs, err)
	case held:
		rep.line(markWarn, "store", "embedded server, store %s: in use by pid %s; connect with this store exits until that process stops (or give it its own NATS_STORE_DIR)", abs, pid)
	default:
		rep.line(markOK, "store", "embedded server, store %s: not in use", abs)
	}
}
