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
