package molecule

import (
	"encoding/json"
	"time"
)

// Generation is the platform generation a client talks to (docs/protocol.md §1).
type Generation int

const (
	// GenerationUnknown: not probed yet, or the probe was inconclusive.
	GenerationUnknown Generation = iota
	// GenerationNew: 2026-05 onwards; poll mode, since_id cursor, 410.
	GenerationNew
	// GenerationOld: up to 2026-04; push only, the feed ignores since_id.
	GenerationOld
)

// String returns "new", "old" or "unknown".
func (g Generation) String() string {
	switch g {
	case GenerationNew:
		return "new"
	case GenerationOld:
		return "old"
	default:
		return "unknown"
	}
}

// DeliveryMode is how the platform delivers inbound messages to an agent.
type DeliveryMode string

const (
	// DeliveryPoll: messages are written to the activity feed and polled.
	DeliveryPoll DeliveryMode = "poll"
	// DeliveryPush: the platform POSTs each message to the agent's URL.
	DeliveryPush DeliveryMode = "push"
)

// Attachment is a file part: {uri, name, mimeType, size}.
type Attachment struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MimeType string `json:"mimeType,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// RateLimit is what the platform last said about the caller's rate budget
// (X-RateLimit-Limit, -Remaining, -Reset).
type RateLimit struct {
	// Known is false until a response carried the headers.
	Known     bool
	Limit     int
	Remaining int
	// Reset is the time left in the window when the response was observed.
	Reset      time.Duration
	ObservedAt time.Time
}

// ResetAt is the wall-clock time the window resets.
func (r RateLimit) ResetAt() time.Time { return r.ObservedAt.Add(r.Reset) }

// Capabilities is runtime_metadata.capabilities. All seven keys are always
// sent, as booleans (anything else is a 400 on the platform).
type Capabilities struct {
	Heartbeat          bool `json:"heartbeat"`
	Scheduler          bool `json:"scheduler"`
	Session            bool `json:"session"`
	StatusMgmt         bool `json:"status_mgmt"`
	Retry              bool `json:"retry"`
	ActivityDecoration bool `json:"activity_decoration"`
	ChannelDispatch    bool `json:"channel_dispatch"`
}

// RegisterRequest is the body of POST /registry/register.
type RegisterRequest struct {
	// Mode is the delivery mode to ask for. If not set, DeliveryPoll.
	Mode DeliveryMode
	// URL is the agent's public URL; required for DeliveryPush, never sent
	// for DeliveryPoll.
	URL string
	// AgentCard is the agent card (any JSON value). If nil, {"name": <workspace id>}.
	AgentCard any
}

// RegisterResult is the platform's answer to a register.
type RegisterResult struct {
	Status string `json:"status"`
	// DeliveryMode is the effective mode; empty on OLD platforms.
	DeliveryMode          DeliveryMode `json:"delivery_mode,omitempty"`
	PlatformInboundSecret string       `json:"platform_inbound_secret,omitempty"`
	// AuthToken is present only on a first registration of a workspace that
	// had no token.
	AuthToken string `json:"auth_token,omitempty"`
}

// Heartbeat is the full heartbeat body. Every field is sent every time,
// because each overwrites the stored value (docs/protocol.md §3).
type Heartbeat struct {
	ActiveTasks   int
	CurrentTask   string
	UptimeSeconds int64
	ErrorRate     float64
	SampleError   string
	Capabilities  Capabilities
	// IdleTimeoutSeconds is sent only when positive.
	IdleTimeoutSeconds int
	// RuntimeState is sent only when non-empty ("wedged" is the only
	// meaningful value).
	RuntimeState string
	// InstanceID is sent as runtime_metadata.relay_instance when set: the
	// relay process, so that two relays on one workspace can be told apart.
	InstanceID string
}

// HeartbeatResult is the platform's answer to a heartbeat.
type HeartbeatResult struct {
	Status                string `json:"status"`
	PlatformInboundSecret string `json:"platform_inbound_secret,omitempty"`
}

// State is GET /workspaces/:id/state.
type State struct {
	WorkspaceID string `json:"workspace_id"`
	Status      string `json:"status"`
	Paused      bool   `json:"paused"`
	Deleted     bool   `json:"deleted"`
}

// WorkspaceInfo is the unauthenticated GET /workspaces/:id.
type WorkspaceInfo struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	URL     string `json:"url"`
	Runtime string `json:"runtime"`
	// Removed is true for 410 (NEW) or status "removed" (OLD).
	Removed   bool      `json:"-"`
	RemovedAt time.Time `json:"-"`
	Hint      string    `json:"-"`
	// Raw is the response body as received.
	Raw json.RawMessage `json:"-"`
}

// Peer is one entry of GET /registry/:id/peers.
type Peer struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Role        string          `json:"role"`
	Tier        int             `json:"tier"`
	Status      string          `json:"status"`
	URL         string          `json:"url"`
	ParentID    string          `json:"parent_id"`
	ActiveTasks int             `json:"active_tasks"`
	AgentCard   json.RawMessage `json:"agent_card"`
}

// Discovery is GET /registry/discover/:id.
type Discovery struct {
	ID   string `json:"id"`
	URL  string `json:"url"`
	Name string `json:"name"`
}

// ActivityQuery selects rows of GET /workspaces/:self/activity. Zero fields
// are not sent.
type ActivityQuery struct {
	// Type filters activity_type, normally "a2a_receive".
	Type string
	// SinceID is the cursor: rows strictly after it, oldest first (NEW).
	SinceID string
	// Limit of rows; the platform's default is 100 and cap 500. Values
	// above 500 are refused client-side.
	Limit int
	// SinceSecs restricts to rows created in the last N seconds (NEW).
	SinceSecs int
	// PeerID restricts to rows whose source or target is that workspace.
	PeerID string
	// BeforeTS restricts to rows created before it.
	BeforeTS time.Time
	// Source is "canvas" or "agent".
	Source string
	// IncludePeerInfo asks 2026-08 platforms for peer_name, peer_role,
	// agent_card_url and attachments; older ones ignore it.
	IncludePeerInfo bool
}

// ActivityRow is one row of a page with just enough decoded to order it.
// JSON is the row exactly as the platform sent it; parse it with ParseRow.
// The IDs and Methods of the rows of one page are pieces of one string
// (a few dozen bytes a row), which a kept ID keeps in memory.
type ActivityRow struct {
	ID        string
	CreatedAt time.Time
	// Method is the row's method ("" when absent or not a string), so a
	// caller can pass over its own "notify" rows without parsing them.
	Method string
	// Seq is the row's seq on 2026-08 platforms, taken when the row was
	// inserted, not when it committed (docs/protocol.md, "The 2026-08
	// feed"); 0 when the row has none.
	Seq  int64
	JSON json.RawMessage
	// valid: JSON was checked with its page by Activity, so Parse splits
	// it without checking it again.
	valid bool
}

// ActivityPage is one answer of GET /activity, rows oldest first whatever
// order the server answered in.
type ActivityPage struct {
	Rows []ActivityRow
	// Limit is the effective limit asked for (100 if none was given).
	Limit int
	// Full is true when len(Rows) == Limit: fetch again at once.
	Full bool
	// Descending is true when the server answered newest-first (no
	// since_id, or an OLD platform); Rows are reversed already.
	Descending bool
	RateLimit  RateLimit
}

// Newest returns the newest row of the page, or nil for an empty page.
func (p *ActivityPage) Newest() *ActivityRow {
	if len(p.Rows) == 0 {
		return nil
	}
	return &p.Rows[len(p.Rows)-1]
}

// NotifyResult is the answer to POST /workspaces/:self/notify.
type NotifyResult struct {
	Status string `json:"status"`
}

// A2AMessage is an outgoing JSON-RPC message/send.
type A2AMessage struct {
	// To is the target workspace id.
	To   string
	Text string
	// MessageID is params.message.messageId. Callers pass a stable id (for
	// replies, events.ReplyMessageID) so a re-send is de-duplicated by the
	// platform's queue. Required.
	MessageID string
	// InReplyTo becomes params.message.metadata.in_reply_to.
	InReplyTo string
	// ContextID and TaskID become params.message.contextId and taskId
	// (A2A's conversation and task ids) when set.
	ContextID string
	TaskID    string
	// Metadata is merged into params.message.metadata.
	Metadata    map[string]any
	Attachments []Attachment
	// Timeout is sent as X-Timeout (seconds) when positive.
	Timeout time.Duration
	// Role is params.message.role. If not set, "agent" (a reply); a
	// question a relay waits on is sent as "user", because a relay drops
	// a peer's role-"agent" message as an answer (its loop guard).
	Role string
}

// A2AResult is a successful answer to an A2A send: 200 queued (poll-mode
// peer), 202 queued (push peer busy), or a push peer's synchronous answer.
type A2AResult struct {
	StatusCode int
	// Queued is true for 200 {"status":"queued"} and 202 {"queued":true}.
	Queued       bool
	DeliveryMode string
	// Body is the raw answer; for a push peer, its JSON-RPC response.
	Body json.RawMessage
}

// Event is one SSE frame of GET /workspaces/:self/events/stream.
type Event struct {
	Type      string          `json:"type"`
	Timestamp int64           `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}
