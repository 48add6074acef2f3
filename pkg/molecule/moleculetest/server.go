// Package moleculetest is an in-memory Molecule platform for tests and the
// CLI's development mode. It listens on 127.0.0.1 over real HTTP and behaves
// like the real servers of both generations (PROTOCOL.md Parts 3 and 4),
// quirks and failures included.
package moleculetest

// CONTRACT STUB: the exported API below is fixed; the bodies are being
// implemented.

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Generation selects which platform generation the double imitates.
type Generation int

const (
	// New is the 2026-05 poll-mode platform (the default).
	New Generation = iota
	// Old is the 2026-04 push-only platform.
	Old
)

// Option configures a Server.
type Option func(*Server)

// WithGeneration selects the platform generation. If not set, New.
func WithGeneration(g Generation) Option { return func(s *Server) {} }

// WithRateLimit sets the fixed-window limit per bucket (org header, else
// sha256 of the bearer, else IP). If not set, 600 per 60 s. n <= 0 disables
// the limiter (X-RateLimit-Limit: unlimited).
func WithRateLimit(n int, window time.Duration) Option { return func(s *Server) {} }

// WithOrgID turns on the tenant guard: requests outside the exempt paths
// need X-Molecule-Org-Id equal to org (or Origin equal to the server's own
// URL), else a bare empty 404.
func WithOrgID(org string) Option { return func(s *Server) {} }

// WithAsyncRows makes the NEW platform write queued a2a_receive rows
// asynchronously, up to d after answering (the early #2339 builds). If not
// set, rows are written before the answer.
func WithAsyncRows(d time.Duration) Option { return func(s *Server) {} }

// WithLateCommit makes a fraction (0..1) of queued rows take a created_at
// up to lag before their visible commit, so a tight since_id poller can miss
// them (PROTOCOL.md §4). Rows become visible after lag.
func WithLateCommit(fraction float64, lag time.Duration) Option { return func(s *Server) {} }

// WithAdminToken sets the admin bearer accepted where the platform accepts
// it. If not set, "admin-local-secret".
func WithAdminToken(tok string) Option { return func(s *Server) {} }

// WithPushTimeout is the OLD/push delivery idle timeout after which a
// message is queued with 202. If not set, 5 minutes.
func WithPushTimeout(d time.Duration) Option { return func(s *Server) {} }

// Server is the platform double.
type Server struct{}

// NewServer starts a platform double on 127.0.0.1 with a random port.
// Stop it with Close (tests: t.Cleanup(s.Close)).
func NewServer(opts ...Option) *Server { return &Server{} }

// URL is the platform base URL, e.g. http://127.0.0.1:43127.
func (s *Server) URL() string { return "" }

// Close stops the server and every stream it holds.
func (s *Server) Close() {}

// AdminToken returns the admin bearer.
func (s *Server) AdminToken() string { return "" }

// Workspace is an external workspace on the double.
type Workspace struct {
	ID    string
	Name  string
	Token string
}

// CreateWorkspace creates an external workspace with a minted 43-character
// token (as POST /workspaces {"runtime":"external"} does); its status is
// awaiting_agent on New and provisioning on Old, delivery mode push.
func (s *Server) CreateWorkspace(name string) Workspace { return Workspace{} }

// CreateChild creates a workspace under parent (for hierarchy checks).
func (s *Server) CreateChild(parent, name string) Workspace { return Workspace{} }

// SendCanvas posts a canvas-user message to workspace to, over HTTP, the
// way the canvas does (no X-Workspace-ID, role "user", kind parts). It
// returns the HTTP status and body.
func (s *Server) SendCanvas(ctx context.Context, to, text string) (int, []byte, error) {
	return 0, nil, nil
}

// SendPeer posts a peer message from workspace from to workspace to, over
// HTTP, with X-Workspace-ID and from's bearer.
func (s *Server) SendPeer(ctx context.Context, from Workspace, to, text string) (int, []byte, error) {
	return 0, nil, nil
}

// SendRaw posts body to /workspaces/:to/a2a with the given headers.
func (s *Server) SendRaw(ctx context.Context, to string, header http.Header, body []byte) (int, []byte, error) {
	return 0, nil, nil
}

// Pause pauses a workspace (POST /workspaces/:id/pause).
func (s *Server) Pause(id string) {}

// Resume resumes it; on an external workspace it ends "failed", as the
// real platform does.
func (s *Server) Resume(id string) {}

// Delete removes a workspace: its tokens stop validating, heartbeat keeps
// answering 200, GET /workspaces/:id answers 410 (New) or status removed
// (Old).
func (s *Server) Delete(id string) {}

// PruneRows deletes every row of a workspace's feed created before t (the
// retention sweep), so cursors pointing at them get 410.
func (s *Server) PruneRows(id string, before time.Time) {}

// Row is an activity row as stored.
type Row = json.RawMessage

// Rows returns a workspace's feed, oldest first, including rows not yet
// visible to pollers.
func (s *Server) Rows(id string) []Row { return nil }

// Notification is one accepted POST /workspaces/:id/notify.
type Notification struct {
	WorkspaceID string
	Message     string
	Attachments json.RawMessage
	At          time.Time
}

// Notifications returns the notifies a workspace posted, in order.
func (s *Server) Notifications(id string) []Notification { return nil }

// A2ACall is one accepted POST /workspaces/:to/a2a.
type A2ACall struct {
	To       string
	CallerID string // X-Workspace-ID, "" for canvas
	Body     json.RawMessage
	Status   int
	At       time.Time
}

// A2ACalls returns accepted A2A posts to workspace to, in order.
func (s *Server) A2ACalls(to string) []A2ACall { return nil }

// RecordedRequest is one request the server received.
type RecordedRequest struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	Status int
	At     time.Time
}

// Requests returns every request received so far, in order.
func (s *Server) Requests() []RecordedRequest { return nil }

// WorkspaceStatus is the double's view of a workspace.
type WorkspaceStatus struct {
	Status        string
	DeliveryMode  string
	URL           string
	Registrations int
	// LastHeartbeat is the last accepted heartbeat body.
	LastHeartbeat json.RawMessage
	Heartbeats    int
}

// Status returns the double's view of workspace id.
func (s *Server) Status(id string) WorkspaceStatus { return WorkspaceStatus{} }

// Fault is an injected failure. The first Count matching requests get it
// (Count 0 means every matching request until ClearFaults).
type Fault struct {
	// Method and PathPrefix select requests ("" matches any).
	Method     string
	PathPrefix string
	// Status and Body answer instead of the real handler (Status 0: the real
	// handler answers, after Latency).
	Status int
	Body   string
	Header http.Header
	// Latency delays the answer.
	Latency time.Duration
	// Drop closes the connection without an answer.
	Drop bool
	// Malformed answers 200 with a body that is not the expected JSON.
	Malformed bool
	Count     int
}

// InjectFault adds a fault.
func (s *Server) InjectFault(f Fault) {}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {}
