package agentapi

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Defaults applied by Config.SetDefaults.
const (
	// DefaultListen is a loopback address on a port the kernel picks.
	DefaultListen = "127.0.0.1:0"
	// DefaultPeersTTL is how long a workspace's peer list is reused.
	DefaultPeersTTL = 30 * time.Second
	// DefaultRateReserve is the rate-limit budget an interim message
	// leaves for the heartbeat (the replier's default too).
	DefaultRateReserve = molecule.DefaultPostReserve
)

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = configerr.For("agentapi")

// Settings are the agent API's environment variables. They live in
// internal/config, which depends on nothing above it; this is their name here.
type Settings = config.Settings

// Config configures a Server. Zero fields take their defaults.
type Config struct {
	// Listen is the address to listen on; it must be a loopback IP
	// literal with a port (127.0.0.1:port, [::1]:port). If not set,
	// DefaultListen.
	Listen string
	// Clients maps a workspace id to its platform client; a message of a
	// workspace without one gets 503 from the endpoints that call the
	// platform. The map must not change afterwards.
	Clients map[string]*molecule.Client
	// Lookup, when set, gives the client of a workspace not in Clients
	// (the workspace registry's, as it is now). It must be quick and safe
	// for concurrent use.
	Lookup func(workspace string) *molecule.Client
	// Records is the bucket where interim messages to a canvas user are
	// recorded before they are posted (events.InterimKey; the dispatcher's
	// handled bucket). If nil, canvas interims are refused with 503.
	Records jetstream.KeyValue
	// Asker asks a peer and waits for its answer. If nil, POST /v1/ask
	// answers 501.
	Asker Asker
	// Secrets allows GET /v1/secrets. If not set, it answers 403.
	Secrets bool
	// MaxFileBytes caps a file read through GET /v1/files. If not set (or
	// above it), the platform's own cap, molecule.MaxUploadBytes (25 MiB).
	MaxFileBytes int64
	// Files, when set, is the dispatcher's attachment cache: GET /v1/files
	// serves a file it holds from disk (the platform may have dropped it
	// once acked) and asks the platform only for one it does not.
	Files *filecache.Cache
	// PeersTTL is how long a peer list is reused. If not set,
	// DefaultPeersTTL.
	PeersTTL time.Duration
	// RateReserve is the rate budget an interim leaves for the heartbeat.
	// If not set, DefaultRateReserve; negative means 0.
	RateReserve int
	// LoopGuard, when set, says why an answer to a message must not be
	// sent, or "" (dispatcher.LoopGuard with the dispatcher's settings): a
	// peer interim is refused for the same reasons the dispatcher drops a
	// reply, so two agents cannot send each other interims forever. If
	// nil, no peer interim is refused.
	LoopGuard func(in *events.Inbound) string
	// BeforeNotify, when set, is called before each interim is posted to
	// a canvas user (the relay notes it in the poller's NotifyLedger, so
	// its own notify row is not taken for another relay's). It must be
	// quick and safe for concurrent use.
	BeforeNotify func(workspace, text string)
	// Logger logs sessions at debug level and failures; never a token or
	// a message body above debug. If not set, nothing is logged.
	Logger *slog.Logger
}

// SetDefaults fills the unset fields.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.PeersTTL == 0 {
		c.PeersTTL = DefaultPeersTTL
	}
	switch {
	case c.RateReserve == 0:
		c.RateReserve = DefaultRateReserve
	case c.RateReserve < 0:
		c.RateReserve = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// checkLoopback is the rule of MOLECULE_AGENT_API_LISTEN
// (config.CheckLoopback), applied to the address New listens on.
var checkLoopback = config.CheckLoopback
