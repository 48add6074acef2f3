package molecule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// a2aBody is the canonical JSON-RPC message/send envelope (docs/protocol.md §6).
type a2aBody struct {
	JSONRPC string    `json:"jsonrpc"`
	ID      string    `json:"id"`
	Method  string    `json:"method"`
	Params  a2aParams `json:"params"`
}

type a2aParams struct {
	Message a2aMessage `json:"message"`
}

type a2aMessage struct {
	Role      string         `json:"role"`
	MessageID string         `json:"messageId"`
	ContextID string         `json:"contextId,omitempty"`
	TaskID    string         `json:"taskId,omitempty"`
	Parts     []a2aPart      `json:"parts"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type a2aPart struct {
	Kind string      `json:"kind"`
	Text string      `json:"text,omitempty"`
	File *Attachment `json:"file,omitempty"`
}

// buildA2A validates m and returns its JSON-RPC body.
func buildA2A(m A2AMessage) (*a2aBody, error) {
	if strings.TrimSpace(m.To) == "" {
		return nil, fmt.Errorf("%w: a2a: target workspace (To) is required", ErrInvalidArgument)
	}
	if m.MessageID == "" {
		return nil, fmt.Errorf("%w: a2a: MessageID is required (a stable id lets the platform de-duplicate)", ErrInvalidArgument)
	}
	if m.Text == "" && len(m.Attachments) == 0 {
		return nil, fmt.Errorf("%w: a2a: a message needs text or attachments", ErrInvalidArgument)
	}
	role := m.Role
	switch role {
	case "":
		role = "agent"
	case "agent", "user":
	default:
		return nil, fmt.Errorf("%w: a2a: role must be \"agent\" or \"user\", got %q", ErrInvalidArgument, m.Role)
	}
	msg := a2aMessage{Role: role, MessageID: m.MessageID, ContextID: m.ContextID, TaskID: m.TaskID, Parts: []a2aPart{}}
	if m.Text != "" {
		msg.Parts = append(msg.Parts, a2aPart{Kind: "text", Text: m.Text})
	}
	for i, a := range m.Attachments {
		if a.URI == "" || a.Name == "" {
			return nil, fmt.Errorf("%w: a2a: attachment[%d]: uri and name are required", ErrInvalidArgument, i)
		}
		a := a
		msg.Parts = append(msg.Parts, a2aPart{Kind: "file", File: &a})
	}
	if len(m.Metadata) > 0 || m.InReplyTo != "" {
		msg.Metadata = make(map[string]any, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			msg.Metadata[k] = v
		}
		if m.InReplyTo != "" {
			msg.Metadata["in_reply_to"] = m.InReplyTo
		}
	}
	return &a2aBody{
		JSONRPC: "2.0",
		ID:      newUUID(),
		Method:  "message/send",
		Params:  a2aParams{Message: msg},
	}, nil
}

// a2aHeaders are the headers of an A2A send besides the standard ones.
func (c *Client) a2aHeaders(m A2AMessage) http.Header {
	h := http.Header{"X-Workspace-Id": {c.cfg.WorkspaceID}}
	if m.Timeout > 0 {
		secs := int64((m.Timeout + 999_999_999) / 1_000_000_000)
		h.Set("X-Timeout", strconv.FormatInt(secs, 10))
	}
	return h
}

// SendA2A posts a JSON-RPC message/send to a peer through the platform
// (POST /workspaces/:to/a2a, X-Workspace-ID: self, role "agent"). It is
// never retried automatically. Only ctx bounds it (not RequestTimeout): a
// push peer may hold the call for up to 30 minutes, and the platform keeps
// delivering after the client gives up.
func (c *Client) SendA2A(ctx context.Context, m A2AMessage) (*A2AResult, error) {
	body, err := buildA2A(m)
	if err != nil {
		return nil, err
	}
	return c.sendA2A(ctx, m, body)
}

func (c *Client) sendA2A(ctx context.Context, m A2AMessage, body *a2aBody) (*A2AResult, error) {
	r := request{
		method:    http.MethodPost,
		path:      "/workspaces/" + url.PathEscape(m.To) + "/a2a",
		body:      body,
		header:    c.a2aHeaders(m),
		noTimeout: true,
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	return a2aResult(resp.status, resp.body), nil
}

// a2aResult reads a 2xx answer: queued (poll peer, or busy push peer) or a
// push peer's own JSON-RPC answer.
func a2aResult(status int, body []byte) *A2AResult {
	res := &A2AResult{StatusCode: status, Body: json.RawMessage(body)}
	var ack struct {
		JSONRPC      string `json:"jsonrpc"`
		Status       string `json:"status"`
		Queued       bool   `json:"queued"`
		DeliveryMode string `json:"delivery_mode"`
	}
	if json.Unmarshal(body, &ack) == nil && ack.JSONRPC == "" {
		res.Queued = ack.Status == "queued" || ack.Queued
		res.DeliveryMode = ack.DeliveryMode
	}
	return res
}

// CallPeer sends m directly to the peer's discovered URL, falling back to
// the platform proxy (SendA2A) when there is no usable URL or the direct
// call fails before the peer could have acted. The platform token is never
// sent to the peer's own URL.
//
// "Before the peer could have acted" means no connection was established
// (DNS failure, connection refused, TLS failure). A failure after that, or a
// non-2xx answer from the peer, is returned matching ErrPeerCall and is not
// re-sent through the platform.
func (c *Client) CallPeer(ctx context.Context, m A2AMessage) (*A2AResult, error) {
	body, err := buildA2A(m)
	if err != nil {
		return nil, err
	}
	d, err := c.discover(ctx, m.To, false)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		c.log.LogAttrs(ctx, slog.LevelDebug, "molecule: discover failed; sending through the platform",
			slog.String("to", m.To), slog.String("error", err.Error()))
		return c.sendA2A(ctx, m, body)
	}
	if !isHTTPURL(d.URL) {
		c.log.LogAttrs(ctx, slog.LevelDebug, "molecule: peer has no usable URL; sending through the platform",
			slog.String("to", m.To))
		return c.sendA2A(ctx, m, body)
	}
	res, connected, err := c.postDirect(ctx, d.URL, m, body)
	if err == nil {
		return res, nil
	}
	if !connected && ctx.Err() == nil {
		c.InvalidateDiscovery(m.To)
		c.log.LogAttrs(ctx, slog.LevelDebug, "molecule: peer URL unreachable; sending through the platform",
			slog.String("to", m.To), slog.String("error", err.Error()))
		return c.sendA2A(ctx, m, body)
	}
	return nil, err
}

// postDirect POSTs body to a peer's own URL with no platform credentials.
// connected reports whether a connection to the peer was established, i.e.
// whether the peer may have received the request.
func (c *Client) postDirect(ctx context.Context, peerURL string, m A2AMessage, body *a2aBody) (res *A2AResult, connected bool, err error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, false, fmt.Errorf("%w: a2a: encoding body: %w", ErrInvalidArgument, err)
	}
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected = true }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, peerURL, bytes.NewReader(b))
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrPeerCall, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	for k, vs := range c.a2aHeaders(m) {
		req.Header[k] = vs
	}
	// Deliberately no Authorization and no tenant headers: the peer is not
	// the platform (docs/protocol.md §9).
	where := redactURL(peerURL)
	resp, err := c.hc.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, connected, fmt.Errorf("molecule: POST %s: %w", where, cerr)
		}
		// url.Error repeats the full URL, which may hold the push secret.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, connected, fmt.Errorf("%w: POST %s: %w", ErrPeerCall, where, err)
	}
	defer resp.Body.Close()
	raw, err := readBounded(resp.Body, c.cfg.MaxResponseBytes)
	if err != nil && !errors.Is(err, ErrResponseTooLarge) {
		return nil, true, fmt.Errorf("%w: POST %s: reading answer: %w", ErrPeerCall, where, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{Method: http.MethodPost, Path: where, StatusCode: resp.StatusCode, Body: truncateUTF8(raw, maxErrorBody), kind: ErrPeerCall}
		var eb errorBody
		if json.Unmarshal(raw, &eb) == nil {
			ae.Message = eb.Error
		}
		return nil, true, ae
	}
	if err != nil {
		return nil, true, fmt.Errorf("%w: POST %s: more than %d bytes", ErrResponseTooLarge, where, c.cfg.MaxResponseBytes)
	}
	return a2aResult(resp.StatusCode, raw), true, nil
}

// redactURL is a peer URL for messages: scheme and host only (a push URL
// may hold its secret in the path or query, docs/protocol.md §8).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(peer URL)"
	}
	return u.Scheme + "://" + u.Host
}

// newUUID returns a random (version 4) UUID.
func newUUID() string { return uuid.NewString() }
