package broker

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
)

// Defaults of Config, applied by SetDefaults.
const (
	// DefaultStoreDir is the embedded server's JetStream store directory
	// of a Config that names none. The CLI and relay.Run name one: the
	// per-user StoreLocation (statedir.go).
	DefaultStoreDir = LegacyStoreDir
	// DefaultEmbeddedPort makes the embedded server pick a free loopback port.
	DefaultEmbeddedPort = -1
	// DefaultConnectTimeout bounds the first connection to NATS.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultClientName is the connection name shown by the server's
	// monitoring endpoints.
	DefaultClientName = "molecule-relay"
	// DefaultSyncInterval makes the embedded server fsync every write
	// before it acknowledges it (JetStream's SyncAlways): a power cut or
	// an OS crash then loses nothing the relay was told is stored.
	// nats-server's own default fsyncs every 2 minutes, and a cut rolls
	// the store back by up to that (docs/powerloss.md has both, measured).
	DefaultSyncInterval = SyncAlways
	// SyncAlways is the SyncInterval that fsyncs every write.
	SyncAlways = "always"
)

// Config says how to reach NATS. The zero value, after SetDefaults, starts
// an embedded server on a random 127.0.0.1 port with its store in
// DefaultStoreDir. It is read from the environment with caarlos0/env; the
// CLI embeds it in its own configuration.
type Config struct {
	// URL of the NATS server or cluster (comma-separated URLs are tried in
	// turn). If empty, an embedded server is started and the credential and
	// TLS settings below must be empty.
	URL string `env:"NATS_URL"`
	// CredsFile is a NATS credentials file (JWT + nkey seed), as issued by
	// nsc or Synadia Cloud. Not together with NKeySeedFile.
	CredsFile string `env:"NATS_CREDS"`
	// NKeySeedFile is a file holding an nkey user seed ("SU…").
	NKeySeedFile string `env:"NATS_NKEY"`
	// User and Password authenticate with a user name and password.
	User     string `env:"NATS_USER"`
	Password string `env:"NATS_PASSWORD"`
	// Token authenticates with a bearer token. Not together with User.
	Token string `env:"NATS_TOKEN"`
	// TLSCAFile is a PEM bundle of CAs trusted to sign the server's
	// certificate. Setting it requires TLS.
	TLSCAFile string `env:"NATS_TLS_CA"`
	// TLSCertFile and TLSKeyFile are a client certificate and its key
	// (mutual TLS). Both or neither.
	TLSCertFile string `env:"NATS_TLS_CERT"`
	TLSKeyFile  string `env:"NATS_TLS_KEY"`
	// StoreDir is the embedded server's JetStream store. If not set,
	// config.Load sets StoreLocation's (the per-user state directory);
	// SetDefaults, DefaultStoreDir (relative to the working directory).
	StoreDir string `env:"NATS_STORE_DIR"`
	// StoreFrom says where StoreDir came from (StoreFromSetting, ...), for
	// the line the embedded server's start logs. Not a setting.
	StoreFrom string
	// EmbeddedPort is the embedded server's client port on 127.0.0.1. If not
	// set (0 or -1), a free port is picked; Conn.URL reports it.
	EmbeddedPort int `env:"NATS_EMBEDDED_PORT" envDefault:"-1"`
	// ConnectTimeout bounds the first connection: the whole time spent
	// retrying an unreachable server, and the embedded server's start. If
	// not set, 5 seconds.
	ConnectTimeout time.Duration `env:"NATS_CONNECT_TIMEOUT" envDefault:"5s"`
	// ClientName is the connection name the server shows. If not set,
	// DefaultClientName.
	ClientName string `env:"NATS_NAME"`
	// SyncInterval is when the embedded server fsyncs its store, as
	// nats-server's sync_interval: "always" (every write, before its
	// acknowledgement) or a duration (in the background that often; what
	// was written since is lost on a power cut or an OS crash, not on a
	// process crash; nats-server's own default is 2m). If not set,
	// DefaultSyncInterval. See docs/powerloss.md.
	SyncInterval string `env:"NATS_SYNC_INTERVAL"`
}

// ConfigError is returned by Validate. Var is the environment variable that
// is wrong.
type ConfigError struct {
	Var string
	Err error
}

func (e *ConfigError) Error() string { return e.Var + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// ErrInvalidConfig is matched (errors.Is) by every ConfigError.
var ErrInvalidConfig = configerr.For("NATS")

// Is reports whether target is ErrInvalidConfig, or the relay's one
// configuration error it matches (configerr.ErrInvalid).
func (e *ConfigError) Is(target error) bool { return errors.Is(ErrInvalidConfig, target) }

func bad(v, format string, args ...any) error {
	return &ConfigError{Var: v, Err: fmt.Errorf(format, args...)}
}

// Embedded reports whether the configuration starts an embedded server.
func (c *Config) Embedded() bool { return strings.TrimSpace(c.URL) == "" }

// SetDefaults fills every unset field with its default.
func (c *Config) SetDefaults() {
	if c.StoreDir == "" {
		c.StoreDir = DefaultStoreDir
	}
	if c.EmbeddedPort == 0 {
		c.EmbeddedPort = DefaultEmbeddedPort
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ClientName == "" {
		c.ClientName = DefaultClientName
	}
	if c.SyncInterval == "" {
		c.SyncInterval = DefaultSyncInterval
	}
}

// StoreSync is SyncInterval parsed: always, or every interval.
func (c *Config) StoreSync() (always bool, interval time.Duration, err error) {
	s := strings.TrimSpace(c.SyncInterval)
	if strings.EqualFold(s, SyncAlways) {
		return true, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return false, 0, fmt.Errorf("%q is neither %q nor a positive duration (nats-server's default is 2m)", c.SyncInterval, SyncAlways)
	}
	return false, d, nil
}

// Validate reports the first wrong setting as a *ConfigError naming its
// environment variable. Call SetDefaults first. Files named by the
// configuration must exist and be readable.
func (c *Config) Validate() error {
	if c.ConnectTimeout <= 0 {
		return bad("NATS_CONNECT_TIMEOUT", "%s; must be positive", c.ConnectTimeout)
	}
	if c.Embedded() {
		for _, s := range []struct{ name, val string }{
			{"NATS_CREDS", c.CredsFile}, {"NATS_NKEY", c.NKeySeedFile}, {"NATS_USER", c.User},
			{"NATS_PASSWORD", c.Password}, {"NATS_TOKEN", c.Token}, {"NATS_TLS_CA", c.TLSCAFile},
			{"NATS_TLS_CERT", c.TLSCertFile}, {"NATS_TLS_KEY", c.TLSKeyFile},
		} {
			if s.val != "" {
				return bad(s.name, "set, but NATS_URL is empty, so an embedded server without authentication is used; set NATS_URL or unset %s", s.name)
			}
		}
		if c.StoreDir == "" {
			return bad("NATS_STORE_DIR", "empty; the embedded server needs a store directory")
		}
		if c.EmbeddedPort < -1 || c.EmbeddedPort > 65535 {
			return bad("NATS_EMBEDDED_PORT", "%d is outside -1..65535", c.EmbeddedPort)
		}
		if _, _, err := c.StoreSync(); err != nil {
			return &ConfigError{Var: "NATS_SYNC_INTERVAL", Err: err}
		}
		return nil
	}
	for _, raw := range strings.Split(c.URL, ",") {
		if err := checkURL(strings.TrimSpace(raw)); err != nil {
			return &ConfigError{Var: "NATS_URL", Err: err}
		}
	}
	switch {
	case c.CredsFile != "" && c.NKeySeedFile != "":
		return bad("NATS_NKEY", "set together with NATS_CREDS; use one of them")
	case c.Token != "" && c.User != "":
		return bad("NATS_TOKEN", "set together with NATS_USER; use one of them")
	case c.Password != "" && c.User == "":
		return bad("NATS_PASSWORD", "set without NATS_USER")
	case (c.CredsFile != "" || c.NKeySeedFile != "") && (c.User != "" || c.Token != ""):
		v := "NATS_CREDS"
		if c.NKeySeedFile != "" {
			v = "NATS_NKEY"
		}
		return bad(v, "set together with NATS_USER or NATS_TOKEN; use one way to authenticate")
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return bad("NATS_TLS_KEY", "empty, but NATS_TLS_CERT is set; a client certificate needs its key")
	case c.TLSKeyFile != "" && c.TLSCertFile == "":
		return bad("NATS_TLS_CERT", "empty, but NATS_TLS_KEY is set; a client key needs its certificate")
	}
	for _, f := range []struct{ name, path string }{
		{"NATS_CREDS", c.CredsFile}, {"NATS_NKEY", c.NKeySeedFile}, {"NATS_TLS_CA", c.TLSCAFile},
		{"NATS_TLS_CERT", c.TLSCertFile}, {"NATS_TLS_KEY", c.TLSKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if err := readable(f.path); err != nil {
			return bad(f.name, "file %q not readable: %w", f.path, err)
		}
	}
	return nil
}

func checkURL(raw string) error {
	if raw == "" {
		return errors.New("empty URL in the list")
	}
	s := raw
	if !strings.Contains(s, "://") {
		s = "nats://" + s // nats.go accepts host:port
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse echoes the input, which may hold a password.
		return fmt.Errorf("%q is not a URL", RedactURL(raw))
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("%q: scheme %q is not one of nats, tls, ws, wss", RedactURL(raw), u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q has no host", RedactURL(raw))
	}
	return nil
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	return nil
}

// RedactURL replaces the user information of every URL in a
// comma-separated list with "redacted", so the list can be logged:
// "nats://alice:secret@host:4222" → "nats://redacted@host:4222".
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		scheme, rest, ok := strings.Cut(p, "://")
		if !ok {
			scheme, rest = "", p
		}
		// The user information ends at the last '@' before the path.
		host := rest
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			host = rest[:j]
		}
		if at := strings.LastIndex(host, "@"); at >= 0 {
			rest = "redacted" + rest[at:]
		}
		if ok {
			parts[i] = scheme + "://" + rest
		} else {
			parts[i] = rest
		}
	}
	return strings.Join(parts, ",")
}
