// Package broker connects Molecule Relay to NATS JetStream: to an external
// server or cluster when a URL is configured, or to an embedded nats-server
// (the real server, with JetStream on a local store directory) when none is.
// Nothing else in the program changes between the two.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Tunables that are not configuration.
const (
	// ReconnectWait is the pause between reconnect attempts to an external
	// server; reconnects go on forever.
	ReconnectWait = 500 * time.Millisecond
	// CloseFlushTimeout bounds Conn.Close's wait for the server to confirm
	// what the connection wrote: a round trip on a healthy connection, and
	// short enough that Close fits the grace of every supervisor the relay
	// runs under (Lambda gives the runtime 500 ms after SIGTERM, Claude
	// Code sends SIGKILL 500 ms after SIGINT).
	CloseFlushTimeout = 250 * time.Millisecond
	// closeCallbacksWait bounds Close's wait for nats.go's last callbacks
	// (our own log lines: microseconds).
	closeCallbacksWait = 50 * time.Millisecond
)

var (
	// ErrConnect is matched by Connect's error when the server could not be
	// reached (or refused us) within Config.ConnectTimeout.
	ErrConnect = errors.New("broker: cannot connect to NATS")
	// ErrEmbedded is matched by Connect's error when the embedded server
	// could not be started.
	ErrEmbedded = errors.New("broker: cannot start the embedded NATS server")
	// ErrStoreLocked is matched, together with ErrEmbedded, when another
	// process holds the embedded server's NATS_STORE_DIR: it is free again
	// the moment that process ends (the mcp command waits for it).
	ErrStoreLocked = errors.New("broker: NATS_STORE_DIR is in use by another process")
	// ErrUnhealthy is matched by Healthy's error.
	ErrUnhealthy = errors.New("broker: NATS connection unhealthy")
)

// Conn is a connection to NATS with a JetStream handle and, when embedded,
// the server it started. Close it when done.
type Conn struct {
	// NC is the NATS connection.
	NC *nats.Conn
	// JS is the JetStream handle on NC.
	JS jetstream.JetStream
	// Server is the embedded server, nil when connected to an external URL.
	Server EmbeddedServer

	url       string
	lastURL   atomic.Value // redacted URL of the server last connected to
	log       *slog.Logger
	closed    chan struct{} // closed by nats.go's last callback
	closeOnce sync.Once
}

// Connect validates cfg (after SetDefaults on a copy), starts the embedded
// server when cfg.URL is empty, and connects. An unreachable external server
// is retried until cfg.ConnectTimeout (or ctx) ends; an authorization
// failure is not retried. Once connected, the connection reconnects forever
// after a loss, logging each disconnect and reconnect. log may be nil.
func Connect(ctx context.Context, cfg Config, log *slog.Logger) (*Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Conn{log: log, closed: make(chan struct{})}
	if cfg.Embedded() {
		if embeddedStarter == nil {
			return nil, fmt.Errorf("%w: this binary has no embedded NATS server (import pkg/relay/embedded); set NATS_URL", ErrEmbedded)
		}
		ns, err := embeddedStarter(cfg, log)
		if err != nil {
			return nil, err
		}
		c.Server = ns
		c.url = ns.ClientURL()
	} else {
		c.url = cfg.URL
	}

	opts, err := c.options(cfg)
	if err != nil {
		c.shutdownServer()
		return nil, err
	}
	nc, err := dial(ctx, c.url, cfg.ConnectTimeout, opts)
	if err != nil {
		c.shutdownServer()
		return nil, fmt.Errorf("%w at %s within %s: %w; check that NATS_URL is right and the server is running and reachable from here, and that NATS_CREDS/NATS_NKEY/NATS_USER/NATS_TOKEN and NATS_TLS_* match what the server expects",
			ErrConnect, RedactURL(c.url), cfg.ConnectTimeout, err)
	}
	c.NC = nc
	if c.JS, err = jetstream.New(nc); err != nil {
		nc.Close()
		c.shutdownServer()
		return nil, fmt.Errorf("broker: jetstream: %w", err)
	}
	c.lastURL.Store(RedactURL(nc.ConnectedUrl()))
	log.InfoContext(ctx, "nats connected", "url", c.lastURL.Load(), "embedded", c.Server != nil, "server_id", nc.ConnectedServerId())
	return c, nil
}

func (c *Conn) options(cfg Config) ([]nats.Option, error) {
	log := c.log
	opts := []nats.Option{
		nats.Name(cfg.ClientName),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "url", c.lastURL.Load(), "err", err)
			} else {
				log.Debug("nats disconnected", "url", c.lastURL.Load())
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			u := RedactURL(nc.ConnectedUrl())
			c.lastURL.Store(u)
			log.Info("nats reconnected", "url", u)
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug("nats reconnect attempt failed", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("nats async error", "subject", sub.Subject, "err", err)
				return
			}
			log.Warn("nats async error", "err", err)
		}),
		// nats.go runs its callbacks on its own goroutine, the closed one
		// last: Close waits for it, so that no callback (the "nats
		// disconnected" line) runs after Close returned.
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, &ConfigError{Var: "NATS_NKEY", Err: fmt.Errorf("file %q: %w", cfg.NKeySeedFile, err)}
		}
		opts = append(opts, o)
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCAFile))
	}
	if cfg.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCertFile, cfg.TLSKeyFile))
	}
	return opts, nil
}

// dial connects, retrying failures other than authorization until timeout
// or ctx ends. Each attempt's dial is bounded by the time left.
func dial(ctx context.Context, url string, timeout time.Duration, opts []nats.Option) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = time.Second
	bo.MaxElapsedTime = 0 // the context bounds the retries
	var last error
	var nc *nats.Conn
	err := backoff.Retry(func() error {
		left := time.Until(deadlineOf(ctx))
		if left <= 0 {
			return backoff.Permanent(context.DeadlineExceeded)
		}
		var err error
		nc, err = nats.Connect(url, append(opts, nats.Timeout(min(left, timeout)))...)
		if err == nil {
			return nil
		}
		last = err
		if isAuthError(err) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(bo, ctx))
	if err == nil {
		return nc, nil
	}
	if last != nil {
		return nil, last
	}
	return nil, err
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrPermissionViolation)
}

// URL is the server's URL for people: the embedded server's client URL
// (nats://127.0.0.1:<port>) or the configured one with any credentials
// redacted (RedactURL). Safe to log or print.
func (c *Conn) URL() string { return RedactURL(c.url) }

// Embedded reports whether c runs its own server.
func (c *Conn) Embedded() bool { return c.Server != nil }

// Healthy flushes the connection, waiting at most timeout, and returns an
// error matching ErrUnhealthy when the server does not answer: a Lambda
// invocation thawed after a long freeze finds its connection dead this way.
func (c *Conn) Healthy(ctx context.Context, timeout time.Duration) error {
	if c.NC.IsClosed() {
		return fmt.Errorf("%w: connection closed", ErrUnhealthy)
	}
	if !c.NC.IsConnected() {
		return fmt.Errorf("%w: not connected (status %s)", ErrUnhealthy, c.NC.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.NC.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("%w: flush: %w", ErrUnhealthy, err)
	}
	return nil
}

// Close makes sure the server has everything this connection wrote
// (acks, naks and publishes nobody waited for): a flush, one round trip
// bounded by CloseFlushTimeout; then it closes the connection, waits for
// nats.go's last callbacks (at most closeCallbacksWait), and shuts the
// embedded server down, waiting for it. It does not drain the
// subscriptions: by now the stages have stopped, and a drain waits (5 s,
// then 1 s more here) for messages nobody reads any more, or for a server
// that stopped answering. Safe to call more than once.
func (c *Conn) Close() {
	c.closeOnce.Do(func() {
		if c.NC != nil && !c.NC.IsClosed() {
			if err := c.NC.FlushTimeout(CloseFlushTimeout); err != nil {
				// Not confirmed: acks come back as redeliveries, publishes
				// are made again by a stage that did not see their ack.
				c.log.Warn("nats did not confirm what this connection wrote before it closed; unconfirmed acks are redelivered",
					"url", c.lastURL.Load(), "timeout", CloseFlushTimeout, "err", err)
			}
			c.NC.Close()
			t := time.NewTimer(closeCallbacksWait)
			select {
			case <-c.closed:
			case <-t.C: // a callback is stuck; not worth the supervisor's grace
			}
			t.Stop()
		}
		c.shutdownServer()
	})
}

func (c *Conn) shutdownServer() {
	if c.Server == nil {
		return
	}
	c.Server.Shutdown()
	c.Server.WaitForShutdown()
	c.log.Debug("embedded nats-server stopped")
}

// EmbeddedServer is a running embedded nats-server.
type EmbeddedServer interface {
	ClientURL() string
	Shutdown()
	WaitForShutdown()
}

// embeddedStarter starts the embedded server; nil unless a package
// registered one. The embedded server lives in its own package so that
// binaries that never embed it (the Lambda functions) do not link
// nats-server.
var embeddedStarter func(cfg Config, log *slog.Logger) (EmbeddedServer, error)

// RegisterEmbedded installs the function Connect uses to start an embedded
// server when NATS_URL is empty. Package pkg/relay/embedded calls it from
// its init; import that package for its side effect to embed NATS.
func RegisterEmbedded(start func(cfg Config, log *slog.Logger) (EmbeddedServer, error)) {
	embeddedStarter = start
}
