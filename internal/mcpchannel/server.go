package mcpchannel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/google/uuid"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/version"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Channel is the mcp handler the server shows messages through.
	Channel *Channel
	// Handled and Replies are the dispatcher's and replier's record
	// buckets: a tool reports an answer done only once its record is there.
	Handled, Replies jetstream.KeyValue
	// Clients are the platform clients by workspace id (list_peers,
	// discover_peer).
	Clients map[string]*molecule.Client
	// OnReady is called once per client, when it has finished
	// initializing; the function it returns is called when the client is
	// gone (the mcp command starts and stops the dispatcher with them). If
	// nil, nothing is called.
	OnReady func() (stop func())
	// ConfirmTimeout bounds a tool's wait for the answer's handled record.
	// If not set, 30 seconds.
	ConfirmTimeout time.Duration
	Logger         *slog.Logger
}

// Server is the MCP stdio server of the channel. Serve may be called again
// after it returned (a new client); one client at a time.
//
// It answers the handshake and lists its tools at once, with or without
// the relay behind it: the mcp command serves the client while another
// session still holds the channel (SetWaiting), and attaches the relay
// when it takes over (Attach).
type Server struct {
	cfg ServerConfig
	mcp *server.MCPServer
	log *slog.Logger

	mu          sync.Mutex
	be          Backend
	attached    bool   // be is set
	waiting     string // why not attached yet ("" once attached)
	initialized bool   // a client has initialized
	// stopReady stops what OnReady started (nil: nothing started).
	stopReady func()
	// handedBack counts the messages shown and handed back unanswered
	// when a client went.
	handedBack atomic.Int64
}

// NewServer builds the MCP server with the claude/channel capability and
// the channel's tools.
func NewServer(cfg ServerConfig) *Server {
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, waiting: "the channel is starting"}
	if cfg.Handled != nil {
		s.Attach(Backend{Handled: cfg.Handled, Replies: cfg.Replies, Clients: cfg.Clients, OnReady: cfg.OnReady})
	}
	hooks := &server.Hooks{}
	hooks.AddAfterInitialize(func(_ context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
		if w := s.Waiting(); w != "" {
			res.Instructions += " " + waitingNote(w)
		}
	})
	s.mcp = server.NewMCPServer("molecule-relay", version.String(),
		server.WithToolCapabilities(false),
		server.WithExperimental(map[string]any{Capability: map[string]any{}, CapabilityPermission: map[string]any{}}),
		server.WithRecovery(),
		server.WithInstructions(instructions),
		server.WithHooks(hooks),
	)
	s.addTools()
	return s
}

// waitingNote tells Claude why nothing arrives yet.
func waitingNote(why string) string {
	return "This session does not receive Molecule messages yet: " + why +
		". It takes over by itself when that ends; the tools answer in the meantime with what they can."
}

// Backend is what the tools and the message delivery need from the relay.
type Backend struct {
	Handled, Replies jetstream.KeyValue
	Clients          map[string]*molecule.Client
	// OnReady: see ServerConfig.OnReady.
	OnReady func() (stop func())
	// rt, when set, gives the tools the delegation and memory stores.
	rt *relay.Runtime
}

// SetWaiting says why the relay is not attached yet (another session holds
// the channel); tools and the initialize result's instructions say it.
func (s *Server) SetWaiting(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.attached {
		s.waiting = why
	}
}

// backend returns the attached relay, or an error saying why there is none.
func (s *Server) backend() (Backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.attached {
		return Backend{}, errors.New(waitingNote(s.waiting))
	}
	return s.be, nil
}

// Waiting is why the relay is not attached, "" once it is.
func (s *Server) Waiting() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// Attach connects the relay: tools work from now on, and if a client has
// initialized, delivery starts (b.OnReady).
func (s *Server) Attach(b Backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.be, s.attached, s.waiting = b, true, ""
	if s.initialized && s.stopReady == nil && b.OnReady != nil {
		s.stopReady = b.OnReady()
	}
}

const instructions = `Messages sent to your Molecule workspaces arrive as channel events from this server. ` +
	`Answer each one with reply_to_workspace (pass its activity_id), or dismiss it when no reply is wanted: ` +
	`a message stays waiting, and is shown again in the next session, until one of the two is called. ` +
	`send_message_to_user posts to the canvas user unprompted; delegate_task and delegate_task_async ask peer workspaces. ` +
	`If you do not see channel events (a client without Claude Code's channels), pull instead: call wait_for_message, ` +
	`answer the message it returns with reply_to_workspace (its activity_id, peer_id and workspace_id), and call wait_for_message again; ` +
	`inbox_peek lists what waits, inbox_pop drops a message without a reply.`

// Serve speaks MCP over in and out (newline-delimited JSON-RPC) until in
// ends, ctx ends, or writing fails. Messages are shown only after the
// client's notifications/initialized. When it returns, messages still
// waiting go back to JetStream. A read blocked on in outlives a cancelled
// ctx until in is closed.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sess := &session{id: uuid.NewString(), notes: make(chan mcp.JSONRPCNotification, 16)}
	if err := s.mcp.RegisterSession(ctx, sess); err != nil {
		return fmt.Errorf("mcpchannel: session: %w", err)
	}
	defer s.mcp.UnregisterSession(context.Background(), sess.id)
	ctx = s.mcp.WithContext(ctx, sess)
	w := &writer{out: out, broken: make(chan struct{})}
	go w.drain(ctx, sess.notes)

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go readLines(in, lines, readErr)

	var (
		wg   sync.WaitGroup
		stop func()
		err  error
	)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-w.broken:
			// The client is gone (EPIPE on stdout): as good as stdin's end.
			s.log.Info("mcp: the client's end of stdout is closed; ending the session", "error", w.err())
			break loop
		case err = <-readErr:
			break loop
		case line := <-lines:
			method, id := head(line)
			switch {
			case method == methodDiscover:
				// The stateless core (protocol 2026-07-28) has no
				// notifications/initialized, which the channel contract
				// waits for: refuse it so the client falls back to the
				// initialize handshake, as Claude Code uses.
				_ = w.write(discoverRefusal(id))
				continue
			case method == string(mcp.MethodNotificationInitialized) && stop == nil:
				stop = s.ready(w)
			case method == MethodPermissionRequest:
				s.permissionRequest(ctx, line)
				continue
			}
			s.handle(ctx, &wg, w, line, id)
		}
	}
	if stop != nil {
		stop() // first: waiting messages fail with ErrClientGone
	}
	cancel()
	wg.Wait()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// ready connects the channel to this client and starts what OnReady
// starts (now, or when the relay is attached). The returned function
// first stops delivering (waiting messages fail with ErrClientGone), then
// stops what OnReady started.
func (s *Server) ready(w *writer) (stop func()) {
	disconnect := s.cfg.Channel.connect(w.notify, func(_ context.Context, id, behavior string) error {
		return w.write(permissionNote(id, behavior))
	})
	s.mu.Lock()
	s.initialized = true
	if s.attached && s.be.OnReady != nil {
		s.log.Info("mcp: client initialized; delivering messages")
		s.stopReady = s.be.OnReady()
	} else {
		s.log.Info("mcp: client initialized; nothing is delivered yet", "why", s.waiting)
	}
	s.mu.Unlock()
	return func() {
		waiting := s.cfg.Channel.Waiting()
		s.handedBack.Add(int64(waiting))
		s.log.Info("mcp: client gone; messages not answered go back to the queue", "waiting", waiting)
		disconnect()
		s.mu.Lock()
		stop := s.stopReady
		s.initialized, s.stopReady = false, nil
		s.mu.Unlock()
		if stop != nil {
			stop()
		}
	}
}

// handle runs a request on its own goroutine (a tool may wait minutes for
// a peer) and a notification or response in line.
func (s *Server) handle(ctx context.Context, wg *sync.WaitGroup, w *writer, line []byte, id json.RawMessage) {
	if len(id) == 0 || string(id) == "null" {
		if resp := s.mcp.HandleMessage(ctx, line); resp != nil {
			w.write(resp)
		}
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if resp := s.mcp.HandleMessage(ctx, line); resp != nil {
			w.write(resp)
		}
	}()
}

const methodDiscover = "server/discover"

// head reads a message's method and id (either may be absent).
func head(line []byte) (method string, id json.RawMessage) {
	var h struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(line, &h)
	return h.Method, h.ID
}

func discoverRefusal(id json.RawMessage) any {
	type rpcErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	return struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcErr          `json:"error"`
	}{mcp.JSONRPC_VERSION, id, rpcErr{mcp.METHOD_NOT_FOUND, "method not found: use initialize"}}
}

func readLines(in io.Reader, lines chan<- []byte, readErr chan<- error) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			lines <- line
		}
		if err != nil {
			readErr <- err
			return
		}
	}
}

// writer serialises JSON-RPC messages onto out, one per line. The first
// failed write closes broken: nothing more can reach the client.
type writer struct {
	mu     sync.Mutex
	out    io.Writer
	failed error
	broken chan struct{}
}

func (w *writer) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

func (w *writer) write(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return w.failed
	}
	if _, err := w.out.Write(append(b, '\n')); err != nil {
		w.failed = err
		close(w.broken)
		return err
	}
	return nil
}

// notify sends one channel notification.
func (w *writer) notify(_ context.Context, n Notification) error {
	return w.write(struct {
		JSONRPC string       `json:"jsonrpc"`
		Method  string       `json:"method"`
		Params  Notification `json:"params"`
	}{mcp.JSONRPC_VERSION, Method, n})
}

// drain forwards the library's own notifications (none in practice).
func (w *writer) drain(ctx context.Context, notes <-chan mcp.JSONRPCNotification) {
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-notes:
			_ = w.write(n)
		}
	}
}

// session is the one MCP session of a Serve call.
type session struct {
	id    string
	ok    bool
	mu    sync.Mutex
	notes chan mcp.JSONRPCNotification
}

func (s *session) Initialize() {
	s.mu.Lock()
	s.ok = true
	s.mu.Unlock()
}

func (s *session) Initialized() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok
}

func (s *session) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.notes }
func (s *session) SessionID() string                                   { return s.id }
