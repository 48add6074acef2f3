package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// runDev is the newcomer's main job: an embedded platform double, embedded
// NATS, the whole pipeline with the chosen handler, and a prompt that sends
// what you type as a canvas user (or, prefixed with "@peer ", as a peer
// agent) and prints the replies as the platform receives them.
func runDev(ctx context.Context, env *cliEnv, args []string) error {
	var (
		once    bool
		demo    bool
		timeout time.Duration
	)
	srv := moleculetest.NewServer()
	defer srv.Close()
	agent := srv.CreateWorkspace("dev-agent")
	peer := srv.CreateWorkspace("dev-peer")

	storeDir, err := os.MkdirTemp("", "molecule-relay-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(storeDir)

	environ := devEnviron(env.environ, srv.URL(), agent, storeDir)
	cfg, err := parseConfig(&cliEnv{stdin: env.stdin, stdout: env.stdout, stderr: env.stderr, environ: environ}, "dev", args,
		config.NeedPlatform|config.NeedHandler, func(fs *flag.FlagSet) {
			fs.BoolVar(&once, "once", false, "send the demo messages, wait for their replies, exit 0 (non-zero if they do not arrive)")
			fs.BoolVar(&demo, "demo", true, "send a canvas and a peer demo message at start")
			fs.DurationVar(&timeout, "timeout", 30*time.Second, "with --once, or when the input ends: how long to wait for the replies")
		})
	if err != nil {
		return err
	}
	log := cfg.NewLogger(env.stderr)

	if err := registerDevPeer(ctx, srv, peer); err != nil {
		return err
	}

	rt, err := relay.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer rt.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(runCtx, relay.All) }()

	out := &syncWriter{w: env.stdout}
	out.printf("Molecule Relay dev mode\n  platform double  %s (the %s platform, poll mode)\n  agent workspace  %s\n  agent token      %s\n  peer workspace   %s\n  NATS             %s (embedded)\n  handler          %s\n",
		srv.URL(), srv.Generation(), agent.ID, agent.Token, peer.ID, rt.Conn.URL(), cfg.Handler)
	out.printf("Type a message and press Enter to send it as a canvas user; start it with \"@peer \" to send it as the peer agent. Ctrl-C or the end of input (Ctrl-D) stops.\n\n")

	printer := &replyPrinter{srv: srv, agentID: agent.ID, peerID: peer.ID, out: out}
	go printer.run(runCtx)

	d := &devSender{srv: srv, agent: agent, peer: peer, out: out}
	// Messages can only queue once the poller registered the workspace in
	// poll mode (until then the platform treats it as a URL-less push
	// workspace and answers 503).
	if err := waitRegistered(ctx, srv, agent.ID, 15*time.Second); err != nil {
		return err
	}
	if demo || once {
		d.send(ctx, "hello from the canvas")
		d.send(ctx, "@peer hello from a peer agent")
	}
	if once {
		if stopped, err := waitDemoReplies(ctx, rt.Topo.Replies, 2, runErr, timeout); stopped || err != nil {
			return err
		}
		printer.sweep() // a sent record means the double has the reply
		out.printf("\nBoth replies arrived: the pipeline works.\n")
		cancel()
		return <-runErr
	}
	if err := d.prompt(ctx, env.stdin, runErr); err != nil || ctx.Err() != nil {
		cancel()
		if err != nil {
			return err
		}
		return <-runErr
	}
	// Stdin ended (Ctrl-D, or `echo hello | molecule-relay dev`): wait for
	// the replies to what was sent, then stop.
	if stopped, err := waitDemoReplies(ctx, rt.Topo.Replies, d.sent, runErr, timeout); !stopped && err != nil {
		cancel()
		<-runErr
		return err
	}
	printer.sweep()
	cancel()
	return <-runErr
}

// devEnviron is the dev command's environment: the platform double's
// workspace and a temporary store, over the caller's environment minus
// whatever it says about a real platform.
func devEnviron(callerEnv []string, platformURL string, agent moleculetest.Workspace, storeDir string) []string {
	environ := append([]string{
		"MOLECULE_PLATFORM_URL=" + platformURL,
		"MOLECULE_WORKSPACE_ID=" + agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + agent.Token,
		"MOLECULE_POLL_INTERVAL=1s",
		"NATS_STORE_DIR=" + storeDir,
	}, callerEnv...)
	// The dev workspace is ours: whatever the caller's environment says about
	// a real platform must not leak into it.
	environ = withoutKeys(environ, "MOLECULE_WORKSPACE_IDS", "MOLECULE_WORKSPACE_TOKENS", "MOLECULE_ORG_ID", "MOLECULE_WORKSPACE_TOKEN_FILE",
		"MOLECULE_PLATFORM_URLS", "MOLECULE_ORG_IDS")
	return append(environ, "MOLECULE_PLATFORM_URL="+platformURL, "MOLECULE_WORKSPACE_ID="+agent.ID, "MOLECULE_WORKSPACE_TOKEN="+agent.Token)
}

// registerDevPeer registers the peer as a poll-mode agent too, so our
// replies queue on its feed.
func registerDevPeer(ctx context.Context, srv *moleculetest.Server, peer moleculetest.Workspace) error {
	peerClient, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: peer.ID, Token: peer.Token})
	if err != nil {
		return err
	}
	if _, err := peerClient.Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPoll, AgentCard: map[string]any{"name": "dev-peer"}}); err != nil {
		return fmt.Errorf("register the dev peer: %w", err)
	}
	return nil
}

// waitDemoReplies waits until the replier has recorded want replies as
// sent; stopped says ctx ended first (Ctrl-C), which is no failure. It
// reads the replier's records, not what the double saw: a handler's
// interim message reaches the double too, and is no reply.
func waitDemoReplies(ctx context.Context, replies jetstream.KeyValue, want int, runErr <-chan error, timeout time.Duration) (stopped bool, err error) {
	deadline := time.After(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, err := sentReplies(ctx, replies); err == nil && n >= want {
			return false, nil
		}
		select {
		case <-tick.C:
		case err := <-runErr:
			return false, fmt.Errorf("pipeline stopped: %v", err)
		case <-deadline:
			return false, fmt.Errorf("%d of the replies did not arrive within %s", want-countOr0(ctx, replies), timeout)
		case <-ctx.Done():
			return true, nil
		}
	}
}

// sentReplies counts the reply records in state sent.
func sentReplies(ctx context.Context, kv jetstream.KeyValue) (int, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var rec events.ReplyRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.State == events.StateSent {
			n++
		}
	}
	return n, nil
}

func countOr0(ctx context.Context, replies jetstream.KeyValue) int {
	n, _ := sentReplies(ctx, replies)
	return n
}

// devSender sends what the dev user types to the platform double.
type devSender struct {
	srv         *moleculetest.Server
	agent, peer moleculetest.Workspace
	out         *syncWriter
	sent        int // messages the double accepted
}

// send sends line as a canvas user, or, prefixed with "@peer ", as the
// peer agent.
func (d *devSender) send(ctx context.Context, line string) {
	if rest, ok := strings.CutPrefix(line, "@peer "); ok {
		d.out.printf("→ peer %s: %s\n", short(d.peer.ID), rest)
		if code, body, err := d.srv.SendPeer(ctx, d.peer, d.agent.ID, rest); err != nil || code != 200 {
			d.out.printf("  send failed: %d %s %v\n", code, body, err)
		} else {
			d.sent++
		}
		return
	}
	d.out.printf("→ canvas user: %s\n", line)
	if code, body, err := d.srv.SendCanvas(ctx, d.agent.ID, line); err != nil || code != 200 {
		d.out.printf("  send failed: %d %s %v\n", code, body, err)
	} else {
		d.sent++
	}
}

// prompt sends every line read from stdin until stdin ends (nil), the
// pipeline stops (its result, non-nil) or ctx ends (nil; ctx.Err is set).
func (d *devSender) prompt(ctx context.Context, stdin io.Reader, runErr <-chan error) error {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil
			}
			if l = strings.TrimSpace(l); l != "" {
				d.send(ctx, l)
			}
		case err := <-runErr:
			if err == nil {
				err = errors.New("the pipeline stopped")
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

func waitRegistered(ctx context.Context, srv *moleculetest.Server, id string, within time.Duration) error {
	deadline := time.Now().Add(within)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for srv.Status(id).DeliveryMode != "poll" {
		if time.Now().After(deadline) {
			return fmt.Errorf("the poller did not register workspace %s in poll mode within %s", id, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// replyPrinter prints what the platform double received from the agent:
// notifies (to the canvas) and A2A messages to the peer, each once.
type replyPrinter struct {
	srv             *moleculetest.Server
	agentID, peerID string
	out             *syncWriter

	mu            sync.Mutex
	nNotify, nA2A int
}

// run sweeps every 20 ms until ctx ends.
func (p *replyPrinter) run(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.sweep()
		}
	}
}

// sweep prints what arrived since the last sweep.
func (p *replyPrinter) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.srv.Notifications(p.agentID)
	for ; p.nNotify < len(ns); p.nNotify++ {
		p.out.printf("← reply to canvas: %s\n", ns[p.nNotify].Message)
	}
	calls := p.srv.A2ACalls(p.peerID)
	for ; p.nA2A < len(calls); p.nA2A++ {
		if c := calls[p.nA2A]; c.CallerID == p.agentID {
			p.out.printf("← reply to peer %s: %s\n", short(p.peerID), a2aText(c.Body))
		}
	}
}

func a2aText(body json.RawMessage) string {
	var rpc struct {
		Params struct {
			Message struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &rpc) != nil {
		return string(body)
	}
	var b strings.Builder
	for _, p := range rpc.Params.Message.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func withoutKeys(environ []string, keys ...string) []string {
	out := environ[:0:0]
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, d := range keys {
			if k == d {
				drop = true
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

type syncWriter struct {
	mu sync.Mutex
	w  interface{ Write([]byte) (int, error) }
}

func (s *syncWriter) printf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, a...)
}
