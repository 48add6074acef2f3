package molecule

// CONTRACT STUB: the exported API below is fixed; the bodies are being
// implemented. Do not rely on behaviour until this comment is gone.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

var errNotImplemented = errors.New("molecule: not implemented yet")

// Config configures a Client for one workspace.
type Config struct {
	// PlatformURL is the tenant root, e.g. https://acme.moleculesai.app.
	// Required; http or https.
	PlatformURL string
	// WorkspaceID is the agent's own workspace id. Required.
	WorkspaceID string
	// Token is the workspace bearer token. Required. Never logged.
	Token string
	// OrgID, when set, is sent as X-Molecule-Org-Id on every request, with
	// Origin: PlatformURL (SaaS tenants).
	OrgID string
	// HTTPClient is used for every request. If nil, a client with no overall
	// timeout (calls are bounded by their context and by RequestTimeout).
	HTTPClient *http.Client
	// RequestTimeout bounds each request whose context has no deadline,
	// except SendA2A/CallPeer (a push peer may take up to 30 minutes) and
	// StreamEvents. If not set, 30 seconds.
	RequestTimeout time.Duration
	// MaxRetries is how many times an idempotent GET is retried on 429, 502,
	// 503, 504 or a transport error. If not set, 3. Negative disables.
	MaxRetries int
	// MaxBackoff caps one wait between GET retries. If not set, 30 seconds.
	MaxBackoff time.Duration
	// MaxResponseBytes caps every response body read. If not set, 10 MiB.
	MaxResponseBytes int64
	// DiscoverTTL is how long Discover answers are cached. If not set, 5
	// minutes.
	DiscoverTTL time.Duration
	// UserAgent is sent on every request. If not set, "molecule-relay".
	UserAgent string
	// Logger receives debug and warning events. If nil, slog.Default().
	Logger *slog.Logger
}

// Client speaks the Molecule platform's remote-agent protocol for one
// workspace. It is safe for concurrent use.
type Client struct {
	cfg Config
}

// New validates cfg, applies defaults and returns a Client. It makes no
// request.
func New(cfg Config) (*Client, error) { return &Client{cfg: cfg}, errNotImplemented }

// WorkspaceID returns the client's workspace id.
func (c *Client) WorkspaceID() string { return c.cfg.WorkspaceID }

// RateLimit returns what the platform last said about the rate budget.
func (c *Client) RateLimit() RateLimit { return RateLimit{} }

// Probe detects the platform generation with the zero-UUID since_id probe:
// 410 → GenerationNew, 200 → GenerationOld, anything else →
// GenerationUnknown with the error that explains it.
func (c *Client) Probe(ctx context.Context) (Generation, error) {
	return GenerationUnknown, errNotImplemented
}

// Register registers the workspace (POST /registry/register). Call it once
// at start-up: each call forces status online and un-pauses the workspace.
func (c *Client) Register(ctx context.Context, req RegisterRequest) (*RegisterResult, error) {
	return nil, errNotImplemented
}

// Heartbeat sends the full heartbeat body (POST /registry/heartbeat).
func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) (*HeartbeatResult, error) {
	return nil, errNotImplemented
}

// State reads GET /workspaces/:self/state.
func (c *Client) State(ctx context.Context) (*State, error) { return nil, errNotImplemented }

// Workspace reads the unauthenticated GET /workspaces/:id. A removed
// workspace (410 on NEW, status "removed" on OLD) is returned with
// Removed set and a nil error.
func (c *Client) Workspace(ctx context.Context, id string) (*WorkspaceInfo, error) {
	return nil, errNotImplemented
}

// CheckRemoved confirms whether the client's own workspace was removed; use
// it when a previously good token starts getting 401.
func (c *Client) CheckRemoved(ctx context.Context) (bool, error) { return false, errNotImplemented }

// Secrets reads GET /workspaces/:self/secrets/values.
func (c *Client) Secrets(ctx context.Context) (map[string]string, error) {
	return nil, errNotImplemented
}

// Peers reads GET /registry/:self/peers, optionally filtered by q.
func (c *Client) Peers(ctx context.Context, q string) ([]Peer, error) { return nil, errNotImplemented }

// Discover reads GET /registry/discover/:id, cached for DiscoverTTL.
func (c *Client) Discover(ctx context.Context, id string) (*Discovery, error) {
	return nil, errNotImplemented
}

// InvalidateDiscovery drops id's cached discovery (all entries if id is "").
func (c *Client) InvalidateDiscovery(id string) {}

// UpdateCard replaces the agent card (POST /registry/update-card).
func (c *Client) UpdateCard(ctx context.Context, card any) error { return errNotImplemented }

// Activity reads one page of GET /workspaces/:self/activity, returned
// oldest first. 410 → an error matching ErrCursorLost.
func (c *Client) Activity(ctx context.Context, q ActivityQuery) (*ActivityPage, error) {
	return nil, errNotImplemented
}

// Notify posts a message to the canvas user (POST /workspaces/:self/notify).
// It is never retried: notify has no idempotency key.
func (c *Client) Notify(ctx context.Context, text string, attachments []Attachment) (*NotifyResult, error) {
	return nil, errNotImplemented
}

// SendA2A posts a JSON-RPC message/send to a peer through the platform
// (POST /workspaces/:to/a2a, X-Workspace-ID: self, role "agent"). It is
// never retried automatically.
func (c *Client) SendA2A(ctx context.Context, m A2AMessage) (*A2AResult, error) {
	return nil, errNotImplemented
}

// CallPeer sends m directly to the peer's discovered URL, falling back to
// the platform proxy (SendA2A) when there is no usable URL or the direct
// call fails before the peer could have acted. The platform token is never
// sent to the peer's own URL.
func (c *Client) CallPeer(ctx context.Context, m A2AMessage) (*A2AResult, error) {
	return nil, errNotImplemented
}

// StreamEvents holds GET /workspaces/:self/events/stream and calls fn for
// each event until ctx ends or the stream breaks; it returns the reason.
// It does not reconnect: callers do, with backoff.
func (c *Client) StreamEvents(ctx context.Context, fn func(Event)) error { return errNotImplemented }
