// Package embedded gives internal/broker an embedded nats-server (the real
// server, JetStream on a local store). Import it for its side effect in
// binaries that may run without NATS_URL:
//
//	import _ "github.com/molecule-ai/molecule-relay/internal/relay/embedded"
package embedded

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/nats-io/nats-server/v2/server"
)

func init() { broker.RegisterEmbedded(start) }

// start starts a nats-server with JetStream on cfg.StoreDir,
// listening on 127.0.0.1 only, logging through log.
func start(cfg broker.Config, log *slog.Logger) (broker.EmbeddedServer, error) {
	if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: NATS_STORE_DIR %q: %w", broker.ErrEmbedded, cfg.StoreDir, err)
	}
	release, err := lockStore(cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("%w: NATS_STORE_DIR: %w", broker.ErrEmbedded, err)
	}
	if prev, _ := readRunning(cfg.StoreDir); prev != nil {
		// Left by a process that did not stop cleanly (killed, an OS
		// crash, a power cut): what it had not synced may be gone, and the
		// poller checks its cursor against the feed's checkpoint.
		log.Info("the last relay on this store did not stop cleanly; its cursor is checked against the checkpoint on each feed",
			"store_dir", cfg.StoreDir, "pid", prev.PID, "started", prev.Started)
	}
	removeRunning(cfg.StoreDir) // a killed holder's
	ns, err := startServer(cfg, log)
	if err != nil {
		release()
		return nil, err
	}
	if err := publishRunning(cfg.StoreDir, ns.ClientURL()); err != nil {
		log.Warn("embedded nats-server not published in its store; status, dlq and history cannot reach it while this process runs",
			"store_dir", cfg.StoreDir, "error", err)
	}
	return &lockedServer{Server: ns, dir: cfg.StoreDir, release: release}, nil
}

// lockedServer releases the store's lock once the server has shut down,
// and is published in its store (Running) until then.
type lockedServer struct {
	*server.Server
	dir     string
	release func()
	once    sync.Once
}

// settleTimeout bounds how long Shutdown waits for JetStream to apply what
// the server already received: a few milliseconds when idle, and well
// inside the grace of the supervisors (Claude Code kills 500 ms after
// SIGINT).
const settleTimeout = 100 * time.Millisecond

// Shutdown first lets JetStream apply what its clients already sent:
// acks, naks and publishes wait in the server's internal queues, and the
// server's stop discards them (nats-server v2.15 consumer.stopWithFlags
// unregisters its ack queue unread), which would bring an acked message
// back after a restart. broker.Conn.Close flushes the connection first,
// so everything sent is in those queues by now. The server is unpublished
// first: nobody is sent to a server that is going away.
func (s *lockedServer) Shutdown() {
	removeRunning(s.dir)
	deadline := time.Now().Add(settleTimeout)
	for len(*s.Ipqueuesz(&server.IpqueueszOptions{})) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.Server.Shutdown()
}

func (s *lockedServer) WaitForShutdown() {
	s.Server.WaitForShutdown()
	s.once.Do(s.release)
}

// startServer starts the server on a store this process holds locked.
func startServer(cfg broker.Config, log *slog.Logger) (*server.Server, error) {
	// Validated by broker.Connect; a config that skipped it gets
	// nats-server's own default (interval 0).
	syncAlways, syncInterval, _ := cfg.StoreSync()
	ns, err := server.NewServer(&server.Options{
		ServerName:   "molecule-relay-embedded",
		Host:         "127.0.0.1",
		Port:         cfg.EmbeddedPort,
		JetStream:    true,
		StoreDir:     cfg.StoreDir,
		SyncAlways:   syncAlways,
		SyncInterval: syncInterval,
		NoSigs:       true,
		// No HTTP monitoring, no cluster, no leafnodes: a private server.
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", broker.ErrEmbedded, err)
	}
	sl := &serverLog{log: log.With("component", "nats-server"), fatal: make(chan string, 1)}
	ns.SetLogger(sl, false, false)
	// Start returns once the client listener is open (or failed, said on
	// fatal), so the first readiness check passes: started on its own
	// goroutine, the server was found ready only at the check's next
	// 25 ms tick (nats-server v2.15 server.go readyForConnections).
	ns.Start()
	wait := max(cfg.ConnectTimeout, 10*time.Second)
	ready := make(chan bool, 1)
	go func() { ready <- ns.ReadyForConnections(wait) }()
	select {
	case ok := <-ready:
		if !ok {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("%w: not ready within %s (store %q, port %d)", broker.ErrEmbedded, wait, cfg.StoreDir, cfg.EmbeddedPort)
		}
	case msg := <-sl.fatal:
		// For example the port is in use (NATS_EMBEDDED_PORT).
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("%w: %s (store %q, NATS_EMBEDDED_PORT %d)", broker.ErrEmbedded, msg, cfg.StoreDir, cfg.EmbeddedPort)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("%w: JetStream did not start on store %q", broker.ErrEmbedded, cfg.StoreDir)
	}
	log.Info("embedded nats-server started", "url", ns.ClientURL(), "store_dir", cfg.StoreDir, "sync_interval", cfg.SyncInterval)
	switch cfg.StoreFrom {
	case broker.StoreFromLegacy:
		log.Info("using the store found in the old place, this working directory; it is used from here only: to use it from any directory, move it to the state directory or set NATS_STORE_DIR",
			"store_dir", cfg.StoreDir)
	case broker.StoreFromNoHome:
		log.Info("no HOME in the environment: the store is in this working directory; set MOLECULE_STATE_DIR or NATS_STORE_DIR to keep it in one place",
			"store_dir", cfg.StoreDir)
	}
	return ns, nil
}

// serverLog sends nats-server's log through slog: notices and debug lines at
// debug level, warnings and errors at their own.
// A fatal error (the server gives up starting) is also sent on fatal.
type serverLog struct {
	log   *slog.Logger
	fatal chan string
}

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}
func (l *serverLog) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLog) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
