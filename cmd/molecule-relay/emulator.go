package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// runEmulator runs the platform double alone, for trying `connect` (or the
// mcp command, or a Go program) against a platform without an account. It
// prints the environment a relay needs, then forwards what is typed on
// stdin, or POSTed to its control endpoint, as canvas or peer messages, and
// prints the replies as the platform receives them.
func runEmulator(ctx context.Context, env *cliEnv, args []string) error {
	var listen, control, envFile string
	fs := newCommandFlags("emulator")
	fs.StringVar(&listen, "listen", "127.0.0.1:8790", "address of the emulated platform (MOLECULE_PLATFORM_URL); port 0 picks a free one")
	fs.StringVar(&control, "control", "127.0.0.1:8791", "address of the control endpoint: POST /canvas and /peer send a message, GET /replies lists replies; empty turns it off")
	fs.StringVar(&envFile, "env-file", "", "also write the environment block to this file (mode 0600), for `set -a; . FILE; set +a`")
	if err := parseFlags(env, "emulator", fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if err := loopbackOnly("--listen", listen); err != nil {
		return err
	}
	if control != "" {
		if err := loopbackOnly("--control", control); err != nil {
			return err
		}
	}

	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("emulator: listen on %s: %w (another emulator running? try --listen 127.0.0.1:0)", listen, err)
	}
	srv := moleculetest.NewServer(moleculetest.WithListener(l))
	defer srv.Close()
	em := &emulator{srv: srv, agent: srv.CreateWorkspace("emulated-agent"), peer: srv.CreateWorkspace("emulated-peer"), out: &syncWriter{w: env.stdout}}
	if err := registerDevPeer(ctx, srv, em.peer); err != nil {
		return err
	}

	var ctl *http.Server
	controlURL := ""
	if control != "" {
		cl, err := net.Listen("tcp", control)
		if err != nil {
			return fmt.Errorf("emulator: control endpoint: listen on %s: %w (--control \"\" turns it off)", control, err)
		}
		controlURL = "http://" + cl.Addr().String()
		ctl = &http.Server{Handler: em.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ctl.Serve(cl) }()
		defer ctl.Close()
	}

	block := em.envBlock()
	if envFile != "" {
		if err := writeFileAtomic(envFile, []byte(block), 0o600); err != nil {
			return fmt.Errorf("emulator: --env-file: %w", err)
		}
	}
	em.out.printf("Molecule platform emulator (the platform double, poll-mode generation) on %s\n", srv.URL())
	em.out.printf("Paste this into the shell that runs the relay")
	if envFile != "" {
		em.out.printf(" (or: set -a; . %s; set +a)", envFile)
	}
	em.out.printf(":\n\n%s\n", block)
	em.out.printf("With it, molecule-relay doctor checks the setup, and molecule-relay mcp install configures Claude Code for this workspace.\n\n")
	em.out.printf("The peer workspace, to run a second relay as the peer agent:\n  MOLECULE_WORKSPACE_ID=%s MOLECULE_WORKSPACE_TOKEN=%s\n\n", em.peer.ID, em.peer.Token)
	em.out.printf("Once the relay runs, type a line here to send it as a canvas user, or \"@peer text\" as the peer agent")
	if controlURL != "" {
		em.out.printf(", or:\n  curl -d 'hello' %s/canvas\n  curl -d 'hello' %s/peer\n  curl %s/replies\n", controlURL, controlURL, controlURL)
	} else {
		em.out.printf(".\n")
	}
	em.out.printf("Replies show here as they reach the platform. Ctrl-C stops.\n\n")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	printer := &replyPrinter{srv: srv, agentID: em.agent.ID, peerID: em.peer.ID, out: em.out}
	go printer.run(runCtx)
	// Stdin ending is no reason to stop: started in the background, the
	// emulator reads an empty stdin and must keep serving until signalled.
	go em.readLines(runCtx, env.stdin)
	<-ctx.Done()
	printer.sweep()
	return nil
}

// emulator is the state of the emulator command.
type emulator struct {
	srv         *moleculetest.Server
	agent, peer moleculetest.Workspace
	out         *syncWriter
}

// envBlock is what a relay needs to serve the emulated agent workspace.
func (e *emulator) envBlock() string {
	return fmt.Sprintf("export MOLECULE_PLATFORM_URL=%s\nexport MOLECULE_WORKSPACE_ID=%s\nexport MOLECULE_WORKSPACE_TOKEN=%s\n",
		e.srv.URL(), e.agent.ID, e.agent.Token)
}

// errNotRegistered: the platform accepts messages for a poll-mode agent only
// once it registered, which `connect` does on its first poll.
var errNotRegistered = errors.New("the agent workspace is not registered in poll mode yet: start the relay (molecule-relay connect) with the environment above, then send again")

// send sends text to the agent as a canvas user, or as the peer agent.
func (e *emulator) send(ctx context.Context, asPeer bool, text string) (int, []byte, error) {
	if e.srv.Status(e.agent.ID).DeliveryMode != "poll" {
		return http.StatusConflict, nil, errNotRegistered
	}
	if asPeer {
		e.out.printf("→ peer %s: %s\n", short(e.peer.ID), text)
		return e.srv.SendPeer(ctx, e.peer, e.agent.ID, text)
	}
	e.out.printf("→ canvas user: %s\n", text)
	return e.srv.SendCanvas(ctx, e.agent.ID, text)
}

// readLines sends every non-empty stdin line until stdin ends.
func (e *emulator) readLines(ctx context.Context, stdin io.Reader) {
	if stdin == nil {
		return
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() && ctx.Err() == nil {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		rest, asPeer := strings.CutPrefix(line, "@peer ")
		if code, body, err := e.send(ctx, asPeer, rest); err != nil || code != http.StatusOK {
			e.out.printf("  not sent: %s\n", sendFailure(code, body, err))
		}
	}
}

func sendFailure(code int, body []byte, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("the platform answered %d %s", code, strings.TrimSpace(string(body)))
}

// emulatedReply is one entry of GET /replies.
type emulatedReply struct {
	To   string `json:"to"` // canvas or peer
	Text string `json:"text"`
}

// controlHandler serves POST /canvas, POST /peer (the body is the message
// text) and GET /replies (what the agent posted so far, as JSON).
func (e *emulator) controlHandler() http.Handler {
	mux := http.NewServeMux()
	sendHandler := func(asPeer bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			text := strings.TrimSpace(string(b))
			if err != nil || text == "" {
				http.Error(w, "the request body is the message text; it was empty", http.StatusBadRequest)
				return
			}
			code, body, err := e.send(r.Context(), asPeer, text)
			switch {
			case errors.Is(err, errNotRegistered):
				http.Error(w, err.Error(), http.StatusConflict)
			case err != nil:
				http.Error(w, err.Error(), http.StatusBadGateway)
			default:
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_, _ = w.Write(body)
			}
		}
	}
	mux.HandleFunc("POST /canvas", sendHandler(false))
	mux.HandleFunc("POST /peer", sendHandler(true))
	mux.HandleFunc("GET /replies", func(w http.ResponseWriter, _ *http.Request) {
		replies := []emulatedReply{}
		for _, n := range e.srv.Notifications(e.agent.ID) {
			replies = append(replies, emulatedReply{To: "canvas", Text: n.Message})
		}
		for _, c := range e.srv.A2ACalls(e.peer.ID) {
			if c.CallerID == e.agent.ID {
				replies = append(replies, emulatedReply{To: "peer", Text: a2aText(c.Body)})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(replies)
	})
	return mux
}

// loopbackOnly refuses an address off the loopback interface: the
// emulator has no real authentication and prints its tokens.
func loopbackOnly(flagName, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Errorf("%s: %q is not host:port (e.g. 127.0.0.1:8790)", flagName, addr)}
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return usageError{fmt.Errorf("%s: %q is not a loopback address; the emulator listens on 127.0.0.1 only", flagName, addr)}
	}
	return nil
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".molecule-relay-env-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// newCommandFlags is a flag set for a command whose flags are its own (not
// the relay's configuration); parse it with parseFlags.
func newCommandFlags(name string) *flag.FlagSet {
	return flag.NewFlagSet("molecule-relay "+name, flag.ContinueOnError)
}
