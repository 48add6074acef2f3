package molecule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxErrorBody is how much of an error body APIError.Body keeps.
const maxErrorBody = 512

// endpoint says which platform route a request is for, so a status can be
// classified the way that route means it (410 is a lost cursor only on the
// activity feed).
type endpoint int

const (
	epOther endpoint = iota
	epActivity
	epWorkspace
	epState
)

// request is one platform call.
type request struct {
	method string
	// path is the URL path under PlatformURL, already escaped.
	path  string
	query url.Values
	// body is marshalled as JSON when non-nil; rawBody is a body already
	// encoded (used instead when set).
	body    any
	rawBody []byte
	// header is added to the standard headers.
	header http.Header
	ep     endpoint
	// noAuth sends no Authorization header (GET /workspaces/:id).
	noAuth bool
	// noTimeout skips RequestTimeout (A2A sends, which a push peer may hold
	// for 30 minutes).
	noTimeout bool
	// accept overrides the Accept header.
	accept string
	// noRetry sends a GET once.
	noRetry bool
}

// response is a platform answer with its body read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends r, retrying idempotent GETs (retry.go). The response is returned
// whenever the platform answered, also together with the *APIError of a
// non-2xx status, so callers can read the body of an expected failure.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	if r.method == http.MethodGet && !r.noRetry && c.cfg.MaxRetries > 0 {
		return c.doWithRetry(ctx, r)
	}
	return c.attempt(ctx, r)
}

// attempt sends r once, or twice when the platform refused a token that
// SetToken replaced while r was out: a 401 is answered before anything is
// done, so sending again with the new token does nothing twice.
func (c *Client) attempt(ctx context.Context, r request) (*response, error) {
	tok := c.bearer()
	resp, err := c.attemptWith(ctx, r, tok)
	if resp != nil && resp.status == http.StatusUnauthorized && !r.noAuth && c.bearer() != tok {
		return c.attemptWith(ctx, r, c.bearer())
	}
	return resp, err
}

func (c *Client) attemptWith(ctx context.Context, r request, tok string) (*response, error) {
	parent := ctx
	if !r.noTimeout && c.cfg.RequestTimeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
			defer cancel()
		}
	}
	req, err := c.newRequest(ctx, r, tok)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.counts.add(0)
		return nil, c.transportError(parent, r, err)
	}
	defer resp.Body.Close()
	c.counts.add(resp.StatusCode)
	c.recordRateLimit(resp.Header)

	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	body, err := readBounded(resp.Body, c.cfg.MaxResponseBytes)
	if err != nil {
		if errors.Is(err, ErrResponseTooLarge) {
			if ok {
				return nil, fmt.Errorf("%w: %s %s: more than %d bytes", ErrResponseTooLarge, r.method, r.path, c.cfg.MaxResponseBytes)
			}
			// An oversized error body still says what the status says.
		} else {
			return nil, c.transportError(parent, r, fmt.Errorf("reading body: %w", err))
		}
	}
	out := &response{status: resp.StatusCode, header: resp.Header, body: body}
	if !ok {
		return out, c.apiError(r, out)
	}
	return out, nil
}

// newRequest builds the HTTP request with every standard header, tok as
// its bearer.
func (c *Client) newRequest(ctx context.Context, r request, tok string) (*http.Request, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	switch {
	case r.rawBody != nil:
		body = bytes.NewReader(r.rawBody)
	case r.body != nil:
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: encoding body: %w", ErrInvalidArgument, r.method, r.path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrInvalidArgument, r.method, r.path, err)
	}
	if body != nil && r.header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	} else {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if !r.noAuth {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c.setTenantHeaders(req.Header)
	for k, vs := range r.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req, nil
}

// setTenantHeaders adds the SaaS tenant headers (docs/protocol.md §2): both, on
// every request, register and heartbeat included.
func (c *Client) setTenantHeaders(h http.Header) {
	if c.cfg.OrgID == "" {
		return
	}
	h.Set("X-Molecule-Org-Id", c.cfg.OrgID)
	h.Set("Origin", c.base)
}

// transportError wraps a failure to get an answer. The caller's own
// cancellation is returned as is (it is not the platform's fault); anything
// else, including a RequestTimeout expiry, matches ErrPlatformUnavailable.
func (c *Client) transportError(parent context.Context, r request, err error) error {
	if cerr := parent.Err(); cerr != nil {
		return fmt.Errorf("molecule: %s %s: %w", r.method, r.path, cerr)
	}
	return fmt.Errorf("%w: %s %s: %w", ErrPlatformUnavailable, r.method, r.path, err)
}

// openStream sends r and returns the 200 response with its body open: for
// bodies read as a stream under the caller's own cap (an event stream, an
// archive, an upload) rather than whole under MaxResponseBytes (do). It
// shares request building, rate-limit accounting and error classification
// with do; a non-200 answer is an *APIError, its body read up to errCap.
// hc is the client that carries it.
func (c *Client) openStream(ctx context.Context, hc *http.Client, r request, errCap int64) (*http.Response, error) {
	req, err := c.newRequest(ctx, r, c.bearer())
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, r, err)
	}
	c.recordRateLimit(resp.Header)
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := readBounded(resp.Body, errCap)
		return nil, c.apiError(r, &response{status: resp.StatusCode, header: resp.Header, body: body})
	}
	return resp, nil
}

// cappedReader reads at most max bytes of r; a body longer than that
// fails with err (on the read that finds the excess, and every read
// after it).
type cappedReader struct {
	r      io.Reader
	n, max int64
	err    error
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, c.err
	}
	if rem := c.max + 1 - c.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n - int(c.n-c.max), c.err
	}
	return n, err
}

// readBounded reads at most limit bytes; a longer body is ErrResponseTooLarge
// (with the first limit bytes returned).
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return b, err
	}
	if int64(len(b)) > limit {
		return b[:limit], ErrResponseTooLarge
	}
	return b, nil
}

// errorBody is the platform's usual error shape.
type errorBody struct {
	Error      string   `json:"error"`
	Code       string   `json:"code"`
	RetryAfter *float64 `json:"retry_after"`
	Deleted    bool     `json:"deleted"`
}

// apiError classifies a non-2xx answer.
func (c *Client) apiError(r request, resp *response) *APIError {
	e := &APIError{Method: r.method, Path: r.path, StatusCode: resp.status}
	e.Body = truncateUTF8(resp.body, maxErrorBody)
	var eb errorBody
	if json.Unmarshal(resp.body, &eb) == nil {
		e.Message = eb.Error
		e.Code = eb.Code
	}
	if d, ok := parseRetryAfter(resp.header.Get("Retry-After"), time.Now()); ok {
		e.RetryAfter = d
	} else if eb.RetryAfter != nil && *eb.RetryAfter > 0 {
		e.RetryAfter = time.Duration(*eb.RetryAfter * float64(time.Second))
	}
	e.kind = classify(r.ep, resp.status, resp.body, eb)
	return e
}

// classify picks the sentinel a status means on an endpoint.
func classify(ep endpoint, status int, body []byte, eb errorBody) error {
	if err := refusalSentinels[status][eb.Error]; err != nil {
		return err
	}
	switch status {
	case http.StatusRequestEntityTooLarge:
		return ErrBodyTooLarge
	case http.StatusPaymentRequired:
		return ErrBudgetExceeded
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusGone:
		if ep == epActivity {
			return ErrCursorLost
		}
		return ErrWorkspaceRemoved
	case http.StatusTooManyRequests:
		return ErrRateLimited
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ErrPlatformUnavailable
	case http.StatusNotFound:
		if len(bytes.TrimSpace(body)) == 0 {
			return ErrTenantRouting
		}
		// GET /state of a soft-deleted row (admin token): {"deleted":true}.
		if ep == epState && eb.Deleted {
			return ErrWorkspaceRemoved
		}
		return ErrNotFound
	}
	return nil
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(n * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// truncateUTF8 returns at most n bytes of b as a string, not splitting a
// UTF-8 sequence.
func truncateUTF8(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	b = b[:n]
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b)
}

// decodeJSON decodes a 2xx body; a body that is not the expected JSON
// matches ErrPlatformUnavailable so callers back off rather than act on it.
func decodeJSON(r request, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %s %s: response body is not the expected JSON: %w", ErrPlatformUnavailable, r.method, r.path, err)
	}
	return nil
}

// RateUnlimited is the Limit and Remaining a RateLimit reports when the
// platform answers X-RateLimit-Limit: unlimited (its dev mode).
const RateUnlimited = 1<<31 - 1

// recordRateLimit stores the X-RateLimit-* headers of a platform answer.
func (c *Client) recordRateLimit(h http.Header) {
	if rl, ok := parseRateLimit(h, time.Now()); ok {
		c.budget.record(rl)
	}
}

// parseRateLimit reads X-RateLimit-Limit/-Remaining/-Reset (Reset in
// seconds). It needs at least a parseable Limit.
func parseRateLimit(h http.Header, now time.Time) (RateLimit, bool) {
	lim := strings.TrimSpace(h.Get("X-RateLimit-Limit"))
	if lim == "" {
		return RateLimit{}, false
	}
	rl := RateLimit{Known: true, ObservedAt: now}
	if strings.EqualFold(lim, "unlimited") {
		rl.Limit, rl.Remaining = RateUnlimited, RateUnlimited
		return rl, true
	}
	n, err := strconv.Atoi(lim)
	if err != nil {
		return RateLimit{}, false
	}
	rl.Limit = n
	rl.Remaining = n
	if v, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining"))); err == nil {
		rl.Remaining = v
	}
	if v, err := strconv.ParseFloat(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 64); err == nil && v >= 0 {
		rl.Reset = time.Duration(v * float64(time.Second))
	}
	return rl, true
}
