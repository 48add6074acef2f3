package molecule

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults applied by New.
const (
	// DefaultRequestTimeout bounds a request whose context has no deadline.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultMaxRetries is how often an idempotent GET is retried.
	DefaultMaxRetries = 3
	// DefaultMaxBackoff caps one wait between GET retries.
	DefaultMaxBackoff = 30 * time.Second
	// DefaultRetryBaseInterval is the first wait between GET retries when
	// the platform gave no Retry-After.
	DefaultRetryBaseInterval = time.Second
	// DefaultMaxResponseBytes caps every response body (10 MiB, the
	// platform's own cap on relayed agent answers).
	DefaultMaxResponseBytes = 10 << 20
	// DefaultDiscoverTTL is how long Discover answers are cached.
	DefaultDiscoverTTL = 5 * time.Minute
	// DefaultUserAgent is sent when Config.UserAgent is empty.
	DefaultUserAgent = "molecule-relay"
	// MaxActivityLimit is the platform's cap on GET /activity's limit.
	MaxActivityLimit = 500
	// DefaultActivityLimit is the platform's limit when none is sent.
	DefaultActivityLimit = 100
)

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
	// StreamHTTPClient, when set, carries the event stream (StreamEvents)
	// instead of HTTPClient: a relay that holds one stream per workspace
	// gives the streams a transport that costs less per held connection.
	// If nil, HTTPClient.
	StreamHTTPClient *http.Client
	// RequestTimeout bounds each request whose context has no deadline,
	// except SendA2A/CallPeer (a push peer may take up to 30 minutes) and
	// StreamEvents. If not set, 30 seconds. Negative disables it. It applies
	// to each attempt of a retried GET.
	RequestTimeout time.Duration
	// MaxRetries is how many times an idempotent GET is retried on 429, 502,
	// 503, 504 or a transport error. If not set, 3. Negative disables.
	MaxRetries int
	// MaxBackoff caps one wait between GET retries. If not set, 30 seconds.
	// A Retry-After longer than MaxBackoff is not waited for: the
	// rate-limited error is returned at once so the caller can pace itself.
	MaxBackoff time.Duration
	// RetryBaseInterval is the first wait between GET retries when the
	// platform gave no Retry-After; later waits double (±25 % jitter). If
	// not set, 1 second. Tests set it to milliseconds.
	RetryBaseInterval time.Duration
	// MaxResponseBytes caps every response body read. If not set, 10 MiB.
	MaxResponseBytes int64
	// DiscoverTTL is how long Discover answers are cached. If not set, 5
	// minutes. Negative disables the cache.
	DiscoverTTL time.Duration
	// UserAgent is sent on every request. If not set, "molecule-relay".
	UserAgent string
	// RelayVersion is the relay_version every heartbeat reports. If not
	// set, "dev".
	RelayVersion string
	// RateBudget is the view of the platform's rate-limit bucket this
	// client's requests count in. Clients whose requests share one bucket
	// (the same X-Molecule-Org-Id on NEW, the same source IP on OLD)
	// should share one RateBudget, so that what one spends the others see
	// at once and TakeBudget keeps a reserve for every member's heartbeat.
	// If nil, the client has a budget of its own (NEW keys a bucket by
	// token when no org id is sent).
	RateBudget *RateBudget
	// Logger receives debug and warning events. If nil, slog.Default().
	Logger *slog.Logger
}

// validate checks cfg and applies the defaults. Its errors name the field
// and never contain the token.
func (cfg *Config) validate() (base string, err error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: config: "+format, append([]any{ErrInvalidArgument}, a...)...)
	}
	if cfg.PlatformURL == "" {
		return "", bad("PlatformURL is required")
	}
	u, perr := url.Parse(cfg.PlatformURL)
	if perr != nil {
		return "", bad("PlatformURL is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", bad("PlatformURL must be http or https, got scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return "", bad("PlatformURL has no host")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", bad("PlatformURL must be a plain base URL (no user info, query or fragment)")
	}
	if strings.TrimSpace(cfg.WorkspaceID) == "" {
		return "", bad("WorkspaceID is required")
	}
	if why := tokenProblem(cfg.Token); why != "" {
		return "", bad("%s", why)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.RetryBaseInterval <= 0 {
		cfg.RetryBaseInterval = DefaultRetryBaseInterval
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.DiscoverTTL == 0 {
		cfg.DiscoverTTL = DefaultDiscoverTTL
	}
	if cfg.RelayVersion == "" {
		cfg.RelayVersion = "dev"
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.StreamHTTPClient == nil {
		cfg.StreamHTTPClient = cfg.HTTPClient
	}
	return strings.TrimRight(cfg.PlatformURL, "/"), nil
}

// tokenProblem says what is wrong with a bearer token, or "".
func tokenProblem(tok string) string {
	if tok == "" {
		return "Token is required"
	}
	for _, r := range tok {
		if r <= ' ' || r == 0x7f {
			return "Token contains whitespace or control characters"
		}
	}
	return ""
}

// Client speaks the Molecule platform's remote-agent protocol for one
// workspace. It is safe for concurrent use.
type Client struct {
	cfg Config
	// token is the bearer sent (Config.Token, then SetToken's).
	token atomic.Pointer[string]
	// base is PlatformURL without a trailing slash (also the Origin).
	base string
	hc   *http.Client
	log  *slog.Logger

	budget *RateBudget

	discMu sync.Mutex
	disc   map[string]discEntry
	peers  peersCache

	counts requestCounts
}

// New validates cfg, applies defaults and returns a Client. It makes no
// request. An invalid cfg yields an error matching ErrInvalidArgument.
func New(cfg Config) (*Client, error) {
	base, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	budget := cfg.RateBudget
	if budget == nil {
		budget = NewRateBudget()
	}
	budget.join()
	c := &Client{
		cfg:    cfg,
		base:   base,
		hc:     cfg.HTTPClient,
		log:    cfg.Logger,
		budget: budget,
		disc:   make(map[string]discEntry),
	}
	c.token.Store(&cfg.Token)
	return c, nil
}

// SetToken replaces the workspace's bearer token: every request that
// starts afterwards carries the new one, and what the client holds (its
// rate budget, caches, a caller's state around it) stays. A request sent
// with the old token that gets 401 is sent once more with the new one, so
// an operator may revoke the old token as soon as SetToken returned. An
// event stream already open keeps its connection; it reconnects with the
// new token. A token that is empty or holds whitespace matches
// ErrInvalidArgument and changes nothing.
func (c *Client) SetToken(token string) error {
	if why := tokenProblem(token); why != "" {
		return fmt.Errorf("%w: SetToken: %s", ErrInvalidArgument, why)
	}
	c.token.Store(&token)
	return nil
}

func (c *Client) bearer() string { return *c.token.Load() }

// WorkspaceID returns the client's workspace id.
func (c *Client) WorkspaceID() string { return c.cfg.WorkspaceID }

// RateLimit returns what the platform last said about the rate budget. A
// platform without a limiter reports Limit and Remaining RateUnlimited.
func (c *Client) RateLimit() RateLimit { return c.budget.get() }

// selfPath is /workspaces/<self><suffix>.
func (c *Client) selfPath(suffix string) string {
	return "/workspaces/" + url.PathEscape(c.cfg.WorkspaceID) + suffix
}

// ZeroCursor is the since_id of the generation probe: a valid UUID that is
// never a row, so a NEW platform answers 410 and an OLD one ignores it.
const ZeroCursor = "00000000-0000-0000-0000-000000000000"

// Probe detects the platform generation with the zero-UUID since_id probe:
// 410 → GenerationNew, 200 → GenerationOld, anything else →
// GenerationUnknown with the error that explains it.
func (c *Client) Probe(ctx context.Context) (Generation, error) {
	q := url.Values{}
	q.Set("type", "a2a_receive")
	q.Set("since_id", ZeroCursor)
	q.Set("limit", "1")
	r := request{method: http.MethodGet, path: c.selfPath("/activity"), query: q, ep: epActivity}
	resp, err := c.do(ctx, r)
	switch {
	case err == nil && resp.status == http.StatusOK:
		return GenerationOld, nil
	case resp != nil && resp.status == http.StatusGone:
		return GenerationNew, nil
	case err == nil:
		return GenerationUnknown, fmt.Errorf("molecule: probe: unexpected HTTP %d", resp.status)
	default:
		return GenerationUnknown, fmt.Errorf("molecule: probe: %w", err)
	}
}

// Register registers the workspace (POST /registry/register). Call it once
// at start-up: each call forces status online and un-pauses the workspace.
// A poll registration never sends a URL; a push one requires an http(s)
// URL. When the platform answers a different delivery_mode than asked, a
// warning is logged and the result returned; an OLD platform answers no
// delivery_mode at all (RegisterResult.DeliveryMode empty).
func (c *Client) Register(ctx context.Context, req RegisterRequest) (*RegisterResult, error) {
	mode := req.Mode
	if mode == "" {
		mode = DeliveryPoll
	}
	body := map[string]any{"id": c.cfg.WorkspaceID, "delivery_mode": mode}
	switch mode {
	case DeliveryPoll:
	case DeliveryPush:
		if !isHTTPURL(req.URL) {
			return nil, fmt.Errorf("%w: register: push mode needs an http(s) URL", ErrInvalidArgument)
		}
		body["url"] = req.URL
	default:
		return nil, fmt.Errorf("%w: register: delivery mode must be %q or %q, got %q", ErrInvalidArgument, DeliveryPoll, DeliveryPush, mode)
	}
	card := req.AgentCard
	if card == nil {
		card = map[string]any{"name": c.cfg.WorkspaceID}
	}
	body["agent_card"] = card
	r := request{method: http.MethodPost, path: "/registry/register", body: body}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var res RegisterResult
	if err := decodeJSON(r, resp.body, &res); err != nil {
		return nil, err
	}
	switch {
	case res.DeliveryMode == "":
		c.log.LogAttrs(ctx, slog.LevelDebug, "molecule: registered; platform reported no delivery mode (OLD platform)",
			slog.String("asked", string(mode)))
	case res.DeliveryMode != mode:
		c.log.LogAttrs(ctx, slog.LevelWarn, "molecule: platform registered a different delivery mode than asked",
			slog.String("asked", string(mode)), slog.String("answered", string(res.DeliveryMode)))
	default:
		c.log.LogAttrs(ctx, slog.LevelDebug, "molecule: registered", slog.String("delivery_mode", string(res.DeliveryMode)))
	}
	return &res, nil
}

// heartbeatBody is the wire form of Heartbeat.
type heartbeatBody struct {
	WorkspaceID     string          `json:"workspace_id"`
	ActiveTasks     int             `json:"active_tasks"`
	CurrentTask     string          `json:"current_task"`
	UptimeSeconds   int64           `json:"uptime_seconds"`
	ErrorRate       float64         `json:"error_rate"`
	SampleError     string          `json:"sample_error"`
	RuntimeMetadata runtimeMetadata `json:"runtime_metadata"`
	RuntimeState    string          `json:"runtime_state,omitempty"`
}

type runtimeMetadata struct {
	Capabilities       Capabilities `json:"capabilities"`
	IdleTimeoutSeconds int          `json:"idle_timeout_seconds,omitempty"`
	RelayVersion       string       `json:"relay_version"`
	// RelayInstance tells two relays on one workspace apart.
	RelayInstance string `json:"relay_instance,omitempty"`
}

// Heartbeat sends the full heartbeat body (POST /registry/heartbeat). It is
// not retried.
func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) (*HeartbeatResult, error) {
	body := heartbeatBody{
		WorkspaceID:     c.cfg.WorkspaceID,
		ActiveTasks:     hb.ActiveTasks,
		CurrentTask:     hb.CurrentTask,
		UptimeSeconds:   hb.UptimeSeconds,
		ErrorRate:       hb.ErrorRate,
		SampleError:     hb.SampleError,
		RuntimeMetadata: runtimeMetadata{Capabilities: hb.Capabilities, RelayVersion: c.cfg.RelayVersion, RelayInstance: hb.InstanceID},
		RuntimeState:    hb.RuntimeState,
	}
	if hb.IdleTimeoutSeconds > 0 {
		body.RuntimeMetadata.IdleTimeoutSeconds = hb.IdleTimeoutSeconds
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: POST /registry/heartbeat: encoding body: %w", ErrInvalidArgument, err)
	}
	r := request{method: http.MethodPost, path: "/registry/heartbeat", rawBody: raw}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var res HeartbeatResult
	if err := decodeJSON(r, resp.body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// State reads GET /workspaces/:self/state. A 404 saying deleted matches
// ErrWorkspaceRemoved; with a workspace token a removed workspace gets 401
// (ErrUnauthorized) instead.
func (c *Client) State(ctx context.Context) (*State, error) {
	r := request{method: http.MethodGet, path: c.selfPath("/state"), ep: epState}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var st State
	if err := decodeJSON(r, resp.body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// removedBody is the NEW platform's 410 answer for a removed workspace.
type removedBody struct {
	ID        string `json:"id"`
	RemovedAt string `json:"removed_at"`
	Hint      string `json:"hint"`
}

// Workspace reads the unauthenticated GET /workspaces/:id. A removed
// workspace (410 on NEW, status "removed" on OLD) is returned with
// Removed set and a nil error. No Authorization header is sent.
func (c *Client) Workspace(ctx context.Context, id string) (*WorkspaceInfo, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("%w: workspace id is required", ErrInvalidArgument)
	}
	r := request{method: http.MethodGet, path: "/workspaces/" + url.PathEscape(id), ep: epWorkspace, noAuth: true}
	resp, err := c.do(ctx, r)
	if resp != nil && resp.status == http.StatusGone {
		info := &WorkspaceInfo{ID: id, Status: "removed", Removed: true, Raw: json.RawMessage(resp.body)}
		var rb removedBody
		if json.Unmarshal(resp.body, &rb) == nil {
			if rb.ID != "" {
				info.ID = rb.ID
			}
			info.Hint = rb.Hint
			if t, perr := time.Parse(time.RFC3339Nano, rb.RemovedAt); perr == nil {
				info.RemovedAt = t
			}
		}
		return info, nil
	}
	if err != nil {
		return nil, err
	}
	var info WorkspaceInfo
	if err := decodeJSON(r, resp.body, &info); err != nil {
		return nil, err
	}
	info.Raw = json.RawMessage(resp.body)
	info.Removed = info.Status == "removed"
	return &info, nil
}

// CheckRemoved confirms whether the client's own workspace was removed; use
// it when a previously good token starts getting 401.
func (c *Client) CheckRemoved(ctx context.Context) (bool, error) {
	info, err := c.Workspace(ctx, c.cfg.WorkspaceID)
	if err != nil {
		return false, err
	}
	return info.Removed, nil
}

// Secrets reads GET /workspaces/:self/secrets/values.
func (c *Client) Secrets(ctx context.Context) (map[string]string, error) {
	r := request{method: http.MethodGet, path: c.selfPath("/secrets/values")}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if err := decodeJSON(r, resp.body, &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]string{}
	}
	return out, nil
}

// Peers reads GET /registry/:self/peers, optionally filtered by q (a
// case-insensitive substring of name or role). It never returns nil on
// success.
func (c *Client) Peers(ctx context.Context, q string) ([]Peer, error) {
	var query url.Values
	if q != "" {
		query = url.Values{"q": {q}}
	}
	r := request{
		method: http.MethodGet,
		path:   "/registry/" + url.PathEscape(c.cfg.WorkspaceID) + "/peers",
		query:  query,
		header: http.Header{"X-Workspace-Id": {c.cfg.WorkspaceID}},
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var peers []Peer
	if err := decodeJSON(r, resp.body, &peers); err != nil {
		return nil, err
	}
	if peers == nil {
		peers = []Peer{}
	}
	return peers, nil
}

// UpdateCard replaces the agent card (POST /registry/update-card). It is not
// retried.
func (c *Client) UpdateCard(ctx context.Context, card any) error {
	if card == nil {
		return fmt.Errorf("%w: update-card: agent card is required", ErrInvalidArgument)
	}
	r := request{
		method: http.MethodPost,
		path:   "/registry/update-card",
		body:   map[string]any{"workspace_id": c.cfg.WorkspaceID, "agent_card": card},
	}
	_, err := c.do(ctx, r)
	return err
}

// notifyBody is the JSON body of POST /notify. A struct rather than a
// map: json.Marshal encodes a map through reflect copies of every key
// and value. The fields are in the order the map's keys were written
// (sorted), so the bytes are the same.
type notifyBody struct {
	Attachments []Attachment `json:"attachments,omitempty"`
	Message     string       `json:"message"`
}

// Notify posts a message to the canvas user (POST /workspaces/:self/notify).
// It is never retried: notify has no idempotency key. text is required;
// each attachment needs URI and Name.
func (c *Client) Notify(ctx context.Context, text string, attachments []Attachment) (*NotifyResult, error) {
	if text == "" {
		return nil, fmt.Errorf("%w: notify: message is required", ErrInvalidArgument)
	}
	for i, a := range attachments {
		if a.URI == "" || a.Name == "" {
			return nil, fmt.Errorf("%w: notify: attachment[%d]: uri and name are required", ErrInvalidArgument, i)
		}
	}
	body := &notifyBody{Attachments: attachments, Message: text}
	r := request{method: http.MethodPost, path: c.selfPath("/notify"), body: body}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var res NotifyResult
	if err := decodeJSON(r, resp.body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// isHTTPURL reports whether s is an absolute http(s) URL with a host.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	return (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Activity reads one page of GET /workspaces/:self/activity, returned
// oldest first. 410 → an error matching ErrCursorLost.
//
// The server answers oldest first only with since_id on a NEW platform;
// otherwise newest first. Activity detects a newest-first page (first
// created_at after the last), reverses it and sets Descending, then
// stable-sorts rows by created_at (rows without a readable created_at keep
// their place). A row that is not a JSON object is kept with an empty ID,
// for ParseRow to report. A Limit above 500 or below 0 is refused with
// ErrInvalidArgument; 0 leaves the platform default (100).
func (c *Client) Activity(ctx context.Context, q ActivityQuery) (*ActivityPage, error) {
	if q.Limit < 0 || q.Limit > MaxActivityLimit {
		return nil, fmt.Errorf("%w: activity: limit must be 0..%d, got %d", ErrInvalidArgument, MaxActivityLimit, q.Limit)
	}
	if q.SinceSecs < 0 {
		return nil, fmt.Errorf("%w: activity: since_secs must not be negative", ErrInvalidArgument)
	}
	if q.Source != "" && q.Source != "canvas" && q.Source != "agent" {
		return nil, fmt.Errorf("%w: activity: source must be \"canvas\" or \"agent\", got %q", ErrInvalidArgument, q.Source)
	}
	query := url.Values{}
	if q.Type != "" {
		query.Set("type", q.Type)
	}
	if q.SinceID != "" {
		query.Set("since_id", q.SinceID)
	}
	limit := DefaultActivityLimit
	if q.Limit > 0 {
		limit = q.Limit
		query.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.SinceSecs > 0 {
		query.Set("since_secs", strconv.Itoa(q.SinceSecs))
	}
	if q.PeerID != "" {
		query.Set("peer_id", q.PeerID)
	}
	if !q.BeforeTS.IsZero() {
		query.Set("before_ts", q.BeforeTS.UTC().Format(time.RFC3339Nano))
	}
	if q.Source != "" {
		query.Set("source", q.Source)
	}
	if q.IncludePeerInfo {
		query.Set("include", "peer_info")
	}
	r := request{method: http.MethodGet, path: c.selfPath("/activity"), query: query, ep: epActivity}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	rows, err := readPage(r, resp.body, limit)
	if err != nil {
		return nil, err
	}
	page := &ActivityPage{Rows: rows, Limit: limit}
	page.Descending = orderRows(page.Rows)
	page.Full = len(page.Rows) == limit
	if rl, ok := parseRateLimit(resp.header, time.Now()); ok {
		page.RateLimit = rl
	} else {
		page.RateLimit = c.RateLimit()
	}
	return page, nil
}

// AckActivity records that the workspace has handled every row of its
// feed with a seq up to seq (POST /workspaces/:self/activity/ack, 2026-08
// platforms): from then on the platform's retention may delete those rows
// 7 days after they were created instead of 30 (docs/protocol.md, "The
// 2026-08 feed"). It returns the platform's stored seq, the greatest ever
// acked, which can be above seq. A platform without acks answers 404: an
// error matching ErrNotFound. seq must not be negative.
func (c *Client) AckActivity(ctx context.Context, seq int64) (int64, error) {
	if seq < 0 {
		return 0, fmt.Errorf("%w: activity ack: acked_seq must not be negative, got %d", ErrInvalidArgument, seq)
	}
	r := request{method: http.MethodPost, path: c.selfPath("/activity/ack"), rawBody: strconv.AppendInt([]byte(`{"acked_seq":`), seq, 10)}
	r.rawBody = append(r.rawBody, '}')
	resp, err := c.do(ctx, r)
	if err != nil {
		return 0, err
	}
	var out struct {
		LastAckedSeq *int64 `json:"last_acked_seq"`
	}
	if err := decodeJSON(r, resp.body, &out); err != nil {
		return 0, err
	}
	if out.LastAckedSeq == nil {
		return 0, fmt.Errorf("%w: POST %s: answer has no last_acked_seq", ErrPlatformUnavailable, r.path)
	}
	return *out.LastAckedSeq, nil
}

// orderRows puts rows oldest first in place and reports whether they came
// newest first. Rows without a created_at keep their index; the others are
// stable-sorted among the remaining slots.
func orderRows(rows []ActivityRow) (descending bool) {
	if !slices.ContainsFunc(rows, undated) {
		// Every row dated (every page the platform writes): the same
		// order, without the index of dated rows.
		descending = len(rows) >= 2 && rows[0].CreatedAt.After(rows[len(rows)-1].CreatedAt)
		if descending {
			slices.Reverse(rows)
		}
		slices.SortStableFunc(rows, byCreatedAt)
		return descending
	}
	var idx []int
	for i, r := range rows {
		if !undated(r) {
			idx = append(idx, i)
		}
	}
	if len(idx) >= 2 && rows[idx[0]].CreatedAt.After(rows[idx[len(idx)-1]].CreatedAt) {
		descending = true
		slices.Reverse(rows)
		for i, j := range idx {
			idx[i] = len(rows) - 1 - j
		}
		slices.Reverse(idx)
	}
	dated := make([]ActivityRow, len(idx))
	for i, j := range idx {
		dated[i] = rows[j]
	}
	slices.SortStableFunc(dated, byCreatedAt)
	for i, j := range idx {
		rows[j] = dated[i]
	}
	return descending
}

func undated(r ActivityRow) bool { return r.CreatedAt.IsZero() }

func byCreatedAt(a, b ActivityRow) int { return a.CreatedAt.Compare(b.CreatedAt) }
