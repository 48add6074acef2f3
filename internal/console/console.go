// Package console is the operator console of a running relay: a web page
// and the JSON endpoints behind it, served as one http.Handler. It shows
// the workspaces (what the poller records in its status bucket), the flow
// of messages live, the dead letters (replay and purge), conversation
// memory, delegations waiting, MCP sessions, the NATS topology and the
// workspace registry (add, pause, resume, remove).
//
// Its assets are plain HTML, CSS and JavaScript embedded in the binary:
// nothing is built or fetched at run time. Every request is authenticated
// (a token or basic auth; with neither, only a loopback listener serves
// it), every action carries a per-session CSRF token, the page runs under
// a strict Content-Security-Policy, and message bodies are withheld until
// an operator reveals one, which is logged.
package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrInvalidOption is returned by New and CheckListen for a bad option.
var ErrInvalidOption = errors.New("console: invalid option")

// Options configure a Console. The zero value serves a console without
// authentication, which only a loopback listener may carry (CheckListen).
type Options struct {
	// Token, when set, is required on every request: as a bearer token
	// (Authorization: Bearer), or once on the login page, which then
	// sets a session cookie.
	Token string
	// User and Password, when both set, require HTTP basic auth.
	User, Password string
	// ReadOnly refuses every action (replay, purge, forget, workspace
	// changes); reveals of
	// a message body stay allowed and logged.
	ReadOnly bool
	// Logger receives the console's log lines (reveals at info). If not
	// set, slog.Default().
	Logger *slog.Logger
	// Live, when set, reports what only the process serving the console
	// knows of each workspace (its rate budget). Nil: not shown.
	Live func() []WorkspaceLive
	// Registry, when set, is the workspace registry the serving relay
	// follows (MOLECULE_WORKSPACE_REGISTRY), started (registry.Start): the
	// Workspaces view lists it from that watch and changes it. Nil: the
	// view says how to turn it on.
	Registry *registry.Registry
}

// WorkspaceLive is what the serving process knows of one workspace now.
type WorkspaceLive struct {
	WorkspaceID string             `json:"workspace_id"`
	RateLimit   molecule.RateLimit `json:"rate_limit"`
}

func (o *Options) auth() bool  { return o.Token != "" || o.basic() }
func (o *Options) basic() bool { return o.User != "" && o.Password != "" }

// Console is the console's http.Handler. Close it when done.
type Console struct {
	js    jetstream.JetStream
	topo  *events.Topology
	opts  Options
	log   *slog.Logger
	mux   http.Handler
	sess  *sessions
	flow  *flow
	start time.Time

	// writeMu guards the answer of canWrite, asked once.
	writeMu                sync.Mutex
	writeChecked, writable bool
}

// New returns the console of the relay whose NATS is js and whose
// topology is topo (events.EnsureTopology or LookupTopology).
func New(js jetstream.JetStream, topo *events.Topology, opts Options) (*Console, error) {
	if js == nil || topo == nil {
		return nil, fmt.Errorf("%w: a JetStream context and a topology are needed", ErrInvalidOption)
	}
	if (opts.User == "") != (opts.Password == "") {
		return nil, fmt.Errorf("%w: basic auth needs both a user and a password", ErrInvalidOption)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Console{js: js, topo: topo, opts: opts, log: log, sess: newSessions(), start: time.Now()}
	c.flow = newFlow(js, log)
	c.mux = c.routes()
	return c, nil
}

// Close stops the live flow's subscriptions and ends the pages' streams.
func (c *Console) Close() { c.flow.close() }

// ServeHTTP serves the console: security headers on every answer, then
// authentication, then the route.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secureHeaders(w.Header())
	c.guard(c.mux).ServeHTTP(w, r)
}

// CheckListen refuses a listen address that is not loopback when opts
// set no authentication: the console would show every workspace to the
// network.
func CheckListen(addr string, opts Options) error {
	if opts.auth() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: listen address %q: %v", ErrInvalidOption, addr, err)
	}
	if !isLoopbackHost(host) {
		return fmt.Errorf("%w: listen address %q is not loopback: set MOLECULE_CONSOLE_TOKEN (or basic auth) to serve the console beyond this machine", ErrInvalidOption, addr)
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve listens on addr (checked with CheckListen) and serves c until
// stop is called; url is the console's address.
func Serve(addr string, c *Console) (url string, stop func(), err error) {
	if err := CheckListen(addr, c.opts); err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("console: server stopped", "error", err)
		}
	}()
	stop = func() {
		c.Close() // ends the pages' event streams, which Shutdown would wait for
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String() + "/", stop, nil
}
