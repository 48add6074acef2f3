// Package ingress is Molecule Relay's push ingress: an HTTP endpoint the
// platform POSTs inbound A2A messages to (OLD platforms, which have no poll
// mode, and push-mode workspaces on NEW ones), publishing each message to
// the same inbound stream the poller feeds.
//
// The platform sends push requests without authentication and without a
// caller id (docs/protocol.md §8). The endpoint therefore authenticates by an
// unguessable secret in the registered URL (/a2a/<secret>, compared in
// constant time; anything else is 404), and every message is published as
// coming from a canvas user.
//
// The request is answered at once, after JetStream acknowledged the
// publish, with an A2A Task in state "submitted" — never with a made-up
// agent message. The handler's reply then travels the normal path
// (dispatcher → replier → /notify). Known limitation: because the push
// carries no caller id, a reply to a PEER that messaged this agent by push
// goes to the canvas (/notify), not back to the peer; the peer only sees
// the submitted task. Answering synchronously with the handler's reply
// would route it correctly, but needs the dispatcher and replier to agree
// that such a reply is already delivered (not implemented).
package ingress

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = configerr.For("ingress")

const (
	// DefaultMaxBodyBytes caps a push request body: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultPublishTimeout bounds the wait for JetStream's ack: 10 s.
	DefaultPublishTimeout = 10 * time.Second
	// MinSecretLength is the shortest accepted path secret (NewSecret makes
	// 43 characters, 256 bits).
	MinSecretLength = 32
	// PathPrefix is the path under which the handler answers.
	PathPrefix = "/a2a/"
	// maxMessageIDLength caps a messageId used as activity id.
	maxMessageIDLength = 200
)

// JSON-RPC error codes used in answers.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Config configures a Handler.
type Config struct {
	// JS publishes to the inbound stream (events.EnsureTopology must have
	// run). Required.
	JS jetstream.JetStream
	// WorkspaceID is the workspace whose pushed messages this handler
	// receives. Required.
	WorkspaceID string
	// Secret is the last path segment of the registered URL; at least
	// MinSecretLength characters of [A-Za-z0-9_-]. Required; NewSecret
	// makes one. Never logged.
	Secret string
	// MaxBodyBytes caps a request body. If not set, 1 MiB.
	MaxBodyBytes int64
	// PublishTimeout bounds the wait for JetStream's ack; it must stay well
	// under the idle timeout the agent declared in its heartbeat. If not
	// set, 10 seconds.
	PublishTimeout time.Duration
	// Logger receives events (never the secret or message bodies above
	// debug). If nil, slog.Default().
	Logger *slog.Logger
}

// Handler is the push endpoint; mount it at PathPrefix (or "/") of a
// server reachable by the platform.
type Handler struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
}

// New validates cfg, applies its defaults and returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = DefaultPublishTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.JS == nil:
		return nil, fmt.Errorf("%w: a JetStream handle is required", ErrInvalidConfig)
	case events.ValidateWorkspaceID(cfg.WorkspaceID) != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, events.ValidateWorkspaceID(cfg.WorkspaceID))
	case len(cfg.Secret) < MinSecretLength || strings.Trim(cfg.Secret, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "":
		return nil, fmt.Errorf("%w: the secret must be at least %d characters of [A-Za-z0-9_-]", ErrInvalidConfig, MinSecretLength)
	case cfg.MaxBodyBytes < 0 || cfg.PublishTimeout < 0:
		return nil, fmt.Errorf("%w: body cap and publish timeout must be positive", ErrInvalidConfig)
	}
	return &Handler{cfg: cfg, log: cfg.Logger.With("workspace", cfg.WorkspaceID), now: time.Now}, nil
}

// NewSecret returns a fresh path secret: 32 random bytes, base64url (43
// characters).
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// secretContext is the HMAC message SecretFromToken signs; changing it
// changes every derived secret (and so every registered URL).
const secretContext = "molecule-relay push ingress v1"

// SecretFromToken derives a workspace's path secret from its platform
// token: base64url(HMAC-SHA256(token, "molecule-relay push ingress v1")),
// 43 characters. It is stable across restarts (the registered URL stays
// valid while the process is down and comes back unchanged), unguessable
// without the token, and changes when the token is rotated. The token
// cannot be recovered from it.
func SecretFromToken(token string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(secretContext))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// URL is the URL to register for push delivery: publicBase (the agent's
// public http(s) root, without a trailing slash) + PathPrefix + secret.
func URL(publicBase, secret string) string {
	return strings.TrimRight(publicBase, "/") + PathPrefix + secret
}

// Register registers the client's workspace in push mode with the given
// URL (see URL). Call it once at start-up, like every register.
func Register(ctx context.Context, c *molecule.Client, pushURL string, card any) (*molecule.RegisterResult, error) {
	return c.Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: pushURL, AgentCard: card})
}

// rpcRequest is the part of a JSON-RPC message/send request read here.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		Message struct {
			MessageID string `json:"messageId"`
			ContextID string `json:"contextId"`
		} `json:"message"`
	} `json:"params"`
}

// ServeHTTP accepts one pushed JSON-RPC request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r.URL.Path) {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, req, ok := h.readRequest(w, r)
	if !ok {
		return
	}
	if req.Method != "message/send" {
		rpcError(w, http.StatusOK, req.ID, CodeMethodNotFound, fmt.Sprintf("method %q is not supported; only message/send", req.Method))
		return
	}
	activityID := req.Params.Message.MessageID
	if activityID == "" {
		activityID = newUUID()
	}
	if len(activityID) > maxMessageIDLength {
		rpcError(w, http.StatusOK, req.ID, CodeInvalidParams, "params.message.messageId is too long")
		return
	}
	now := h.now().UTC()
	data, ok := h.envelope(w, &req, body, activityID, now)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.PublishTimeout)
	defer cancel()
	ctx, span := tracing.Start(ctx, "publish", trace.SpanKindProducer)
	defer span.End()
	ack, err := h.cfg.JS.PublishMsg(ctx, &nats.Msg{Subject: events.InboundSubject(h.cfg.WorkspaceID), Data: data, Header: tracing.Header(ctx)},
		jetstream.WithMsgID(events.InboundMsgID(h.cfg.WorkspaceID, activityID)), jetstream.WithExpectStream(events.StreamInbound))
	if err != nil {
		// Not acknowledged: answer an error so the platform reports the
		// failure to the caller instead of the message vanishing.
		h.log.Error("ingress: pushed message not queued", "message_id", activityID, "error", err)
		rpcError(w, http.StatusServiceUnavailable, req.ID, CodeInternalError, "message not queued; retry later")
		return
	}
	h.log.Info("ingress: pushed message queued", "message_id", activityID, "duplicate", ack.Duplicate)
	contextID := req.Params.Message.ContextID
	if contextID == "" {
		contextID = activityID
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"jsonrpc": "2.0", "id": rawOrNull(req.ID),
		"result": map[string]any{
			"kind": "task", "id": activityID, "contextId": contextID,
			"status": map[string]any{"state": "submitted", "timestamp": now.Format(time.RFC3339Nano)},
		},
	})
}

// readRequest reads the JSON-RPC request (at most MaxBodyBytes); false
// means the error was answered.
func (h *Handler) readRequest(w http.ResponseWriter, r *http.Request) (body []byte, req rpcRequest, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.log.Warn("ingress: push request body over the cap; refused", "limit", h.cfg.MaxBodyBytes)
			rpcError(w, http.StatusRequestEntityTooLarge, nil, CodeInvalidRequest, "request body too large")
			return nil, req, false
		}
		rpcError(w, http.StatusBadRequest, nil, CodeParseError, "could not read the request body")
		return nil, req, false
	}
	if err := json.Unmarshal(body, &req); err != nil {
		rpcError(w, http.StatusBadRequest, nil, CodeParseError, "request is not valid JSON")
		return nil, req, false
	}
	return body, req, true
}

// envelope is the encoded inbound envelope of the pushed message; false
// means the error was answered.
func (h *Handler) envelope(w http.ResponseWriter, req *rpcRequest, body []byte, activityID string, now time.Time) ([]byte, bool) {
	// The push carries the normalised JSON-RPC request; wrap it as the
	// activity row the platform would have written, so parsing and the
	// envelope are the poller's own.
	row, err := json.Marshal(map[string]any{
		"id": activityID, "workspace_id": h.cfg.WorkspaceID, "activity_type": "a2a_receive",
		"source_id": nil, "target_id": h.cfg.WorkspaceID, "method": req.Method, "summary": "pushed " + req.Method,
		"status": "ok", "request_body": json.RawMessage(body), "created_at": now.Format(time.RFC3339Nano),
	})
	if err != nil {
		rpcError(w, http.StatusOK, req.ID, CodeInternalError, "could not encode the message")
		return nil, false
	}
	m, err := molecule.ParseRow(row, h.cfg.WorkspaceID)
	if err != nil {
		h.log.Warn("ingress: malformed pushed message refused", "message_id", activityID, "error", err)
		rpcError(w, http.StatusOK, req.ID, CodeInvalidParams, "malformed message: "+err.Error())
		return nil, false
	}
	env := events.NewInbound(h.cfg.WorkspaceID, m, now)
	data, err := env.Marshal()
	if err != nil {
		rpcError(w, http.StatusOK, req.ID, CodeInternalError, "could not encode the message")
		return nil, false
	}
	return data, true
}

// authorized compares the path's secret in constant time.
func (h *Handler) authorized(path string) bool {
	s, ok := strings.CutPrefix(path, PathPrefix)
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(s), []byte(h.cfg.Secret)) == 1
}

func rawOrNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

func rpcError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	writeJSON(w, status, map[string]any{
		"jsonrpc": "2.0", "id": rawOrNull(id),
		"error": map[string]any{"code": code, "message": msg},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newUUID() string { return uuid.NewString() }
