// Package natstest starts real embedded NATS servers with JetStream for
// tests, on 127.0.0.1 with a random port and a per-test store directory.
package natstest

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded nats-server with JetStream, stopped at test cleanup.
type Server struct {
	*server.Server
	StoreDir string
	Port     int
	opts     *server.Options
}

// Start starts a server with a fresh store directory.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWithStore(t, t.TempDir(), -1)
}

// StartEdited starts a server with a fresh store directory and the
// options edit changes (for example SyncAlways).
func StartEdited(t testing.TB, edit func(*server.Options)) *Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	edit(opts)
	return start(t, opts)
}

// StartWithStore starts a server on storeDir; port -1 picks a random port.
// Restarting on the same dir and port simulates a NATS restart.
func StartWithStore(t testing.TB, storeDir string, port int) *Server {
	t.Helper()
	return start(t, &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
	})
}

func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	orig := opts.Clone() // the server fills opts in; Restart starts from these
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatalf("natstest: server not ready within 10s")
	}
	s := &Server{Server: ns, StoreDir: opts.StoreDir, Port: ns.Addr().(*net.TCPAddr).Port, opts: orig}
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down and waits for it; safe to call twice.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart stops the server and starts a new one with the same options,
// store and port.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	s.Stop()
	opts := s.opts.Clone()
	opts.Port = s.Port
	return start(t, opts)
}

// Connect dials the server and returns the connection and a JetStream
// handle; the connection is closed at test cleanup. The connection retries
// forever on disconnect so tests can restart the server under it.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, url)
}

// ConnectCuttable is Connect without reconnects: closing the connection
// cuts the client off from NATS for good (a lease holder, a group member).
func ConnectCuttable(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return dial(t, url, nats.NoReconnect())
}

func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return dial(t, url, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))...)
}

func dial(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}
