package molecule

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; an *APIError matches the one
// its status and endpoint imply.
var (
	// ErrUnauthorized: 401. With a previously good token it usually means
	// the workspace was deleted; confirm with Client.Workspace.
	ErrUnauthorized = errors.New("molecule: unauthorized")
	// ErrCursorLost: 410 on GET /activity; the since_id row is gone
	// (retention, or another workspace's id). Reset and re-seed.
	ErrCursorLost = errors.New("molecule: activity cursor lost")
	// ErrWorkspaceRemoved: the workspace was deleted on the platform.
	ErrWorkspaceRemoved = errors.New("molecule: workspace removed")
	// ErrRateLimited: 429. The *APIError carries RetryAfter.
	ErrRateLimited = errors.New("molecule: rate limited")
	// ErrPlatformUnavailable: 502, 503, 504, or a transport failure.
	ErrPlatformUnavailable = errors.New("molecule: platform unavailable")
	// ErrTenantRouting: a bare empty 404, which on SaaS means a missing
	// X-Molecule-Org-Id/Origin or the edge WAF, not "not found".
	ErrTenantRouting = errors.New("molecule: request not routed to the tenant (check org id and platform URL)")
	// ErrNotFound: a 404 with a body.
	ErrNotFound = errors.New("molecule: not found")
	// ErrOldPlatform: the operation needs a NEW platform (poll mode).
	ErrOldPlatform = errors.New("molecule: platform does not support poll mode")
	// ErrInvalidArgument: the call was refused client-side before any request.
	ErrInvalidArgument = errors.New("molecule: invalid argument")
	// ErrResponseTooLarge: a response body exceeded Config.MaxResponseBytes.
	// The body is never silently truncated.
	ErrResponseTooLarge = errors.New("molecule: response body too large")
	// ErrStreamEnded: the platform closed the event stream (EOF). Callers
	// reconnect with backoff.
	ErrStreamEnded = errors.New("molecule: event stream ended")
	// ErrPeerCall: a direct call to a peer's own URL (CallPeer) failed after
	// the request may have reached the peer, or the peer answered non-2xx.
	// It is not re-sent: the peer may already have acted.
	ErrPeerCall = errors.New("molecule: direct call to peer failed")
)

// Sentinels of the 2026-08 platform's refusals (enteros-core aeec8e47,
// docs/protocol.md "Generations"), told apart by the JSON "error" of the
// answer. Each is permanent: the same request gets the same answer until
// someone changes a setting.
var (
	// ErrTalkToUserDisabled: 403 talk_to_user_disabled on /notify; the
	// workspace's canvas setting "talk to user" is off.
	ErrTalkToUserDisabled = errors.New("molecule: talking to the user is disabled for this workspace")
	// ErrDelegationDisabled: 403 "tool call failed" on /a2a; the calling
	// workspace has can_delegate=false, which refuses every message/send
	// to another workspace, replies included.
	ErrDelegationDisabled = errors.New("molecule: the workspace may not send A2A messages (can_delegate=false)")
	// ErrHierarchy: 403 on /a2a, the hierarchy rules do not let the two
	// workspaces talk.
	ErrHierarchy = errors.New("molecule: the hierarchy rules do not let these workspaces talk")
	// ErrCallerMismatch: 401 "caller ID does not match workspace auth
	// token" on /a2a (X-Workspace-ID is not the token's workspace). It
	// matches ErrUnauthorized too.
	ErrCallerMismatch = fmt.Errorf("%w: X-Workspace-ID is not the workspace of the token", ErrUnauthorized)
	// ErrCallerAuthMissing: 401 "missing caller auth token" on /a2a. It
	// matches ErrUnauthorized too.
	ErrCallerAuthMissing = fmt.Errorf("%w: no caller token", ErrUnauthorized)
	// ErrBodyTooLarge: 413; the platform takes at most 16 MiB on /a2a.
	ErrBodyTooLarge = errors.New("molecule: request body too large for the platform")
	// ErrBudgetExceeded: 402 on /a2a; the target's budget is spent.
	ErrBudgetExceeded = errors.New("molecule: workspace budget limit exceeded")
	// ErrInvalidCallerID: 403 "invalid caller ID" on /a2a; X-Workspace-ID
	// has a system prefix (webhook:, system:, test:, channel:).
	ErrInvalidCallerID = errors.New("molecule: the platform refused the caller id")
	// ErrPeerHasNoURL: 503 "workspace has no URL" on /a2a; the target has
	// not registered a URL and is not settling (2026-08 queues a settling
	// one with 202). It matches ErrPlatformUnavailable too.
	ErrPeerHasNoURL = fmt.Errorf("%w: the target workspace has no URL", ErrPlatformUnavailable)
	// ErrPeerNotRoutable: 502 "workspace URL is not publicly routable" on
	// /a2a. It matches ErrPlatformUnavailable too.
	ErrPeerNotRoutable = fmt.Errorf("%w: the target's URL is not publicly routable", ErrPlatformUnavailable)
	// ErrMemoryNotConfigured: 503 on /memories from a platform without a
	// memory plugin (MEMORY_PLUGIN_URL unset). It does not match
	// ErrPlatformUnavailable: retrying cannot change it.
	ErrMemoryNotConfigured = errors.New("molecule: the platform has no memory plugin (MEMORY_PLUGIN_URL unset)")
)

// permanentRefusals are the sentinels of refusals that stay until someone
// changes a setting or the request (RefusalOf).
var permanentRefusals = []error{ErrTalkToUserDisabled, ErrDelegationDisabled, ErrHierarchy, ErrInvalidCallerID,
	ErrCallerMismatch, ErrCallerAuthMissing, ErrBodyTooLarge, ErrBudgetExceeded, ErrPeerNotRoutable, ErrMemoryNotConfigured}

// RefusalOf returns the sentinel of the permanent refusal err is (one of
// the sentinels above, from ErrTalkToUserDisabled to
// ErrMemoryNotConfigured), or nil: sending the same request again gets
// the same answer.
func RefusalOf(err error) error {
	for _, s := range permanentRefusals {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// refusalSentinels maps the "error" of a 2026-08 refusal to its sentinel,
// by status.
var refusalSentinels = map[int]map[string]error{
	403: {
		"invalid caller ID":     ErrInvalidCallerID,
		"talk_to_user_disabled": ErrTalkToUserDisabled,
		"tool call failed":      ErrDelegationDisabled,
		"access denied: workspaces cannot communicate per hierarchy rules": ErrHierarchy,
	},
	401: {
		"caller ID does not match workspace auth token": ErrCallerMismatch,
		"missing caller auth token":                     ErrCallerAuthMissing,
	},
	502: {"workspace URL is not publicly routable": ErrPeerNotRoutable},
	503: {
		"memory plugin is not configured (set MEMORY_PLUGIN_URL)": ErrMemoryNotConfigured,
		"workspace has no URL": ErrPeerHasNoURL,
	},
}

// APIError is a non-success answer from the platform.
type APIError struct {
	// Method and Path of the request (no query string: it may hold a cursor,
	// never a secret, but is kept out for brevity).
	Method string
	Path   string
	// StatusCode is the HTTP status.
	StatusCode int
	// Message is the "error" field of the JSON body, when there was one.
	Message string
	// Code is the "code" field of the JSON body (e.g. "platform_unavailable").
	Code string
	// Body is the response body, truncated to 512 bytes.
	Body string
	// RetryAfter is Retry-After (or the body's retry_after), when given.
	RetryAfter time.Duration
	// kind is the sentinel this error matches, decided by the client from
	// the status and endpoint.
	kind error
}

// Error describes the failure without secrets.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Body
	}
	if msg == "" {
		msg = "(empty body)"
	}
	s := fmt.Sprintf("molecule: %s %s: HTTP %d: %s", e.Method, e.Path, e.StatusCode, msg)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// Unwrap returns the sentinel the status implies, or nil.
func (e *APIError) Unwrap() error { return e.kind }

// RetryAfterOf returns the wait the platform asked for in err (an *APIError
// anywhere in its chain), or 0.
func RetryAfterOf(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	return 0
}

// StatusOf returns the HTTP status of the *APIError in err's chain, or 0
// when err is not an answer from the platform (transport failure, invalid
// argument, nil).
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}
