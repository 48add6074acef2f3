// Package moleculetest is an in-memory Molecule platform for tests and the
// CLI's development mode. It listens on 127.0.0.1 over real HTTP and behaves
// like the real servers of both generations (docs/protocol.md),
// quirks and failures included.
//
// Timestamps: created_at is real time truncated to the microsecond. To keep
// tests reproducible, a workspace's rows get created_at = max(now, last+1µs),
// so two ordinary rows of one feed never tie (unless WithTimestampTies);
// the since_id cursor means "created_at strictly greater than the cursor
// row's" on 2026-05 and "(created_at, seq) greater" on 2026-08. Rows
// delayed by WithLateCommit keep the created_at (and seq) they were given
// when accepted and become visible behind newer rows, which is how the real
// platform loses rows under a tight since_id poller.
// created_at (and removed_at) are rendered as the platform's Go encoder
// renders a microsecond timestamp: RFC 3339 in UTC with trailing zeros of
// the fraction trimmed ("…:36.7457Z", or "…:36Z" on a whole second).
package moleculetest

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"
)

// Generation selects which platform generation the double imitates. The
// generations are ordered by date, so "has poll mode" is g >= Gen2026_05.
// The zero value stands for the newest (docs/protocol.md, "Generations").
type Generation int

const (
	// Gen2026_04 is the push-only platform (Molecule-AI/molecule-core
	// 7cf77f2): no poll mode, the feed ignores since_id.
	Gen2026_04 Generation = iota + 1
	// Gen2026_05 is the first poll-mode platform (EnterOS-AI/enteros-core
	// eaf7dbb).
	Gen2026_05
	// Gen2026_08 is the platform at enteros-core aeec8e47 (2026-08-14),
	// the newest: the default.
	Gen2026_08
	// Newest is the generation a Server imitates when none is chosen.
	Newest = Gen2026_08
)

// String names the generation by its month, "2026-08".
func (g Generation) String() string {
	switch g {
	case Gen2026_04:
		return "2026-04"
	case Gen2026_05:
		return "2026-05"
	case Gen2026_08:
		return "2026-08"
	}
	return "unknown"
}

// Option configures a Server.
type Option func(*Server)

// WithGeneration selects the platform generation. If not set (or 0),
// Newest.
func WithGeneration(g Generation) Option {
	return func(s *Server) {
		if g == 0 {
			g = Newest
		}
		s.gen = g
	}
}

// WithRateLimit sets the fixed-window limit per bucket (org header, else
// sha256 of the bearer, else IP). If not set, 600 per 60 s. n <= 0 disables
// the limiter (X-RateLimit-Limit: unlimited). A window <= 0 means 60 s.
func WithRateLimit(n int, window time.Duration) Option {
	return func(s *Server) {
		if window <= 0 {
			window = time.Minute
		}
		s.rl.limit, s.rl.window = n, window
	}
}

// WithOrgID turns on the tenant guard: requests outside the exempt paths
// need X-Molecule-Org-Id equal to org (or Origin equal to the server's own
// URL), else a bare empty 404.
func WithOrgID(org string) Option { return func(s *Server) { s.org = org } }

// WithAsyncRows makes the NEW platform write queued a2a_receive rows
// asynchronously, up to d after answering (the early #2339 builds). If not
// set, rows are written before the answer. The delay of each row is drawn
// from a generator seeded by WithSeed.
func WithAsyncRows(d time.Duration) Option { return func(s *Server) { s.asyncRows = d } }

// WithLateCommit makes a fraction (0..1) of queued rows take a created_at
// up to lag before their visible commit, so a tight since_id poller can miss
// them (docs/protocol.md §4). Rows become visible after lag. The choice is
// deterministic: the queued rows are counted server-wide and row n is late
// when floor(n*fraction) > floor((n-1)*fraction), so fraction 0.1 makes
// every 10th queued row late.
func WithLateCommit(fraction float64, lag time.Duration) Option {
	return func(s *Server) {
		if fraction < 0 {
			fraction = 0
		}
		if fraction > 1 {
			fraction = 1
		}
		s.lateFraction, s.lateLag = fraction, lag
	}
}

// WithTimestampTies makes every second row of a feed take the created_at
// of the row before it, as two inserts in one microsecond do on the
// platform, so that the cursor's tie-break shows: after a since_id of the
// first, 2026-05 (created_at strictly greater) skips the second and
// 2026-08 ((created_at, seq)) returns it. If not set, no two rows of a
// feed tie.
func WithTimestampTies() Option { return func(s *Server) { s.ties = true } }

// WithAdminToken sets the admin bearer accepted where the platform accepts
// it. If not set, "admin-local-secret".
func WithAdminToken(tok string) Option { return func(s *Server) { s.admin = tok } }

// WithPushTimeout is the OLD/push delivery idle timeout after which a
// message is queued with 202. If not set, 5 minutes. A workspace's
// heartbeat runtime_metadata.idle_timeout_seconds overrides it for that
// workspace, as on the real platform.
func WithPushTimeout(d time.Duration) Option { return func(s *Server) { s.pushTimeout = d } }

// WithoutRequestLog turns off request recording (Requests returns nil),
// for benchmarks. If not set, requests are recorded (see
// WithRequestLogLimit).
func WithoutRequestLog() Option { return func(s *Server) { s.reqLimit = -1 } }

// WithRequestLogLimit keeps only the last n recorded requests. If not set,
// the last 20,000 are kept. n <= 0 keeps every request.
func WithRequestLogLimit(n int) Option {
	return func(s *Server) {
		if n <= 0 {
			n = 0
		}
		s.reqLimit = n
	}
}

// WithTLS serves HTTPS, with HTTP/2 as a platform behind TLS offers it,
// on httptest's self-signed certificate: a client must trust CertPEM. If
// not set, plain HTTP/1.1.
func WithTLS() Option { return func(s *Server) { s.tls = true } }

// CertPEM returns the certificate of a WithTLS double in PEM (for a
// child process's SSL_CERT_FILE), nil without TLS.
func (s *Server) CertPEM() []byte {
	if !s.tls {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ts.Certificate().Raw})
}

// WithoutMemoryPlugin models a 2026-08 deployment without
// MEMORY_PLUGIN_URL: POST and GET /workspaces/:id/memories answer 503
// {"error":"memory plugin is not configured (set MEMORY_PLUGIN_URL)"}
// (enteros-core aeec8e47 handlers/memories.go:221-226, 350-355). If not
// set, the double has a memory plugin. Earlier generations ignore it.
func WithoutMemoryPlugin() Option { return func(s *Server) { s.noMemoryPlugin = true } }

// WithSeed seeds the pseudo-random choices of the double (the delays of
// WithAsyncRows). If not set, 1.
func WithSeed(seed uint64) Option { return func(s *Server) { s.seed = seed } }

// WithListener serves the double on l instead of a new listener on a random
// 127.0.0.1 port, so that a standalone emulator can keep a known address;
// the Server closes l. If not set, a random port on 127.0.0.1.
func WithListener(l net.Listener) Option { return func(s *Server) { s.listener = l } }

// Server is the platform double.
type Server struct {
	// configuration, fixed after NewServer
	gen          Generation
	org          string
	asyncRows    time.Duration
	lateFraction float64
	lateLag      time.Duration
	ties         bool
	admin        string
	pushTimeout  time.Duration
	reqLimit     int // -1 off, 0 unlimited
	seed         uint64
	listener     net.Listener
	tls          bool
	// noMemoryPlugin: a 2026-08 platform without MEMORY_PLUGIN_URL.
	noMemoryPlugin bool

	ts     *httptest.Server
	url    string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	client     *http.Client // helpers' own calls (SendCanvas …)
	pushClient *http.Client // push deliveries

	rl rateLimiter

	// mems is the agent memory store (memories.go).
	mems memories
	// mu guards the workspace registry, tokens and workspace fields.
	mu         sync.RWMutex
	workspaces map[string]*workspace
	order      []*workspace
	tokens     map[string]*token
	globals    map[string]string
	uploads    uploadStore

	// logMu guards the notify and A2A call logs, apart from mu so that
	// writers do not contend with token checks.
	logMu    sync.Mutex
	notifies map[string][]Notification
	a2aCalls map[string][]A2ACall

	bus bus

	reqMu    sync.Mutex
	requests []*RecordedRequest
	reqStart int

	faultMu sync.Mutex
	faults  []*faultState

	// accepted counts the TCP connections the server accepted (Accepted).
	accepted atomic.Int64
	// windowRows and cursorRows count the activity rows served to reads
	// without since_id (windows) and with it (ActivityRowsServed).
	windowRows, cursorRows atomic.Int64

	randMu  sync.Mutex
	rand    *rand.Rand
	queuedN uint64 // guarded by randMu
}

// NewServer starts a platform double on 127.0.0.1 with a random port.
// Stop it with Close (tests: t.Cleanup(s.Close)).
func NewServer(opts ...Option) *Server {
	s := &Server{
		gen:         Newest,
		admin:       "admin-local-secret",
		pushTimeout: 5 * time.Minute,
		reqLimit:    20000,
		seed:        1,
		workspaces:  map[string]*workspace{},
		tokens:      map[string]*token{},
		globals:     map[string]string{},
		notifies:    map[string][]Notification{},
		a2aCalls:    map[string][]A2ACall{},
	}
	s.rl.limit, s.rl.window = 600, time.Minute
	for _, o := range opts {
		o(s)
	}
	s.rl.buckets = map[string]*bucket{}
	s.rand = rand.New(rand.NewPCG(s.seed, s.seed^0x9e3779b97f4a7c15))
	s.bus.subs = map[string]map[*subscriber]struct{}{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	s.pushClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	s.ts = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	s.ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.accepted.Add(1)
		}
	}
	if s.listener != nil {
		s.ts.Listener.Close()
		s.ts.Listener = s.listener
	}
	if s.tls {
		s.ts.EnableHTTP2 = true
		s.ts.StartTLS()
		tr := s.ts.Client().Transport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		s.client = &http.Client{Transport: tr}
	} else {
		s.ts.Start()
	}
	s.url = s.ts.URL
	return s
}

// Accepted returns how many TCP connections the double has accepted since
// it started: a client that keeps its connections alive opens few.
func (s *Server) Accepted() int64 { return s.accepted.Load() }

// ActivityRowsServed returns how many activity rows the double has served
// since it started: to window reads (no since_id: since_secs, before_ts
// or a bare read) and to cursor reads (since_id). A reader's cost on the
// platform is the rows it makes the platform serve.
func (s *Server) ActivityRowsServed() (window, cursor int64) {
	return s.windowRows.Load(), s.cursorRows.Load()
}

// URL is the platform base URL, e.g. http://127.0.0.1:43127.
func (s *Server) URL() string { return s.url }

// Close stops the server and every stream it holds. It cancels push
// deliveries and pending row commits, ends SSE streams, and waits for the
// server's goroutines. It is safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		s.cancel()
		s.bus.closeAll()
		s.ts.CloseClientConnections()
		s.ts.Close()
		s.wg.Wait()
		s.client.CloseIdleConnections()
		s.pushClient.CloseIdleConnections()
	})
}

// AdminToken returns the admin bearer.
func (s *Server) AdminToken() string { return s.admin }

// Generation returns the generation the double imitates.
func (s *Server) Generation() Generation { return s.gen }

// Workspace is an external workspace on the double.
type Workspace struct {
	ID    string
	Name  string
	Token string
}

// CreateWorkspace creates an external workspace with a minted 43-character
// token (as POST /workspaces {"runtime":"external"} does); its status is
// awaiting_agent on New and provisioning on Old, delivery mode push.
func (s *Server) CreateWorkspace(name string) Workspace { return s.create(name, "") }

// CreateChild creates a workspace under parent (for hierarchy checks).
func (s *Server) CreateChild(parent, name string) Workspace { return s.create(name, parent) }

// SendCanvas posts a canvas-user message to workspace to, over HTTP, the
// way the canvas does (no X-Workspace-ID, role "user", kind parts, and on
// 2026-08 the same-origin headers of CanvasHeader). It returns the HTTP
// status and body.
func (s *Server) SendCanvas(ctx context.Context, to, text string) (int, []byte, error) {
	return s.SendRaw(ctx, to, s.CanvasHeader(), canvasBody(text, "user"))
}

// CanvasHeader is what the canvas of a self-hosted combined image sends
// with its requests: Origin equal to the platform's own URL, no bearer.
// On 2026-08 that is how /a2a accepts a canvas caller when no session
// verifier is configured (enteros-core aeec8e47
// handlers/a2a_proxy_helpers.go:1014-1016, middleware/wsauth_middleware.go:575-600);
// without it (and without a bearer) /a2a answers 401 "missing caller auth
// token". Earlier generations need nothing.
func (s *Server) CanvasHeader() http.Header {
	h := http.Header{}
	h.Set("Origin", s.url)
	return h
}

// SetTalkToUser sets a workspace's talk_to_user_enabled (canvas setting,
// default true). On 2026-08 a disabled workspace's /notify answers 403
// {"error":"talk_to_user_disabled","hint":…} (enteros-core aeec8e47
// handlers/activity.go:872-877).
func (s *Server) SetTalkToUser(id string, enabled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.talkToUserOff = !enabled
	}
}

// SetCanDelegate sets a workspace's can_delegate (default true). On
// 2026-08 a message/send from a workspace with can_delegate=false to
// another workspace answers 403 {"error":"tool call failed"}, replies
// included (enteros-core aeec8e47 handlers/a2a_proxy.go:789-797).
func (s *Server) SetCanDelegate(id string, enabled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.cannotDelegate = !enabled
	}
}

// SetBudgetExceeded marks a workspace's budget as exceeded for the given
// periods (e.g. "monthly"); none clears it. On 2026-08 every /a2a to it
// answers 402 {"error":"workspace budget limit exceeded",
// "exceeded_periods":[…]} (enteros-core aeec8e47
// handlers/a2a_proxy.go:664-695, 738-740).
func (s *Server) SetBudgetExceeded(id string, periods ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.budgetOver = append([]string(nil), periods...)
	}
}

// SetConciergeWarming makes a workspace a platform concierge that is
// provisioning (warming up), or not. On 2026-08 an /a2a to a warming
// concierge from anyone but itself answers 503 with Retry-After: 5
// (enteros-core aeec8e47 handlers/a2a_proxy.go:813-817, 1185-1207).
func (s *Server) SetConciergeWarming(id string, warming bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.warming = warming
	}
}

// SendPeer posts a peer message from workspace from to workspace to, over
// HTTP, with X-Workspace-ID and from's bearer.
func (s *Server) SendPeer(ctx context.Context, from Workspace, to, text string) (int, []byte, error) {
	h := http.Header{}
	h.Set("X-Workspace-ID", from.ID)
	h.Set("Authorization", "Bearer "+from.Token)
	return s.SendRaw(ctx, to, h, peerBody(text))
}

// SendRaw posts body to /workspaces/:to/a2a with the given headers. When
// the tenant guard is on, the org header is added unless header sets it.
func (s *Server) SendRaw(ctx context.Context, to string, header http.Header, body []byte) (int, []byte, error) {
	return s.do(ctx, http.MethodPost, "/workspaces/"+to+"/a2a", header, body)
}

// Pause pauses a workspace (POST /workspaces/:id/pause).
func (s *Server) Pause(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil && !w.removed {
		w.status = "paused"
	}
}

// Resume resumes it; on an external workspace it ends "failed", as the
// real platform does.
func (s *Server) Resume(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil && !w.removed {
		w.status = "failed"
	}
}

// Delete removes a workspace: its tokens stop validating, heartbeat keeps
// answering 200, GET /workspaces/:id answers 410 (New) or status removed
// (Old).
func (s *Server) Delete(id string) { s.remove(id) }

// MintToken mints another token for a live workspace (POST
// /workspaces/:id/tokens); "" when there is no such workspace. Every
// token minted before keeps working until RevokeToken.
func (s *Server) MintToken(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workspaces[id]
	if w == nil || w.removed {
		return ""
	}
	return s.mintLocked(w)
}

// RevokeToken revokes one token (DELETE /workspaces/:id/tokens/:tokenId):
// from then on it gets 401 wherever a workspace token is checked.
func (s *Server) RevokeToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tokens[tok]; t != nil && !t.revoked {
		t.revoked = true
		t.ws.liveTokens--
	}
}

// PruneRows deletes every row of a workspace's feed created before t (the
// retention sweep), so cursors pointing at them get 410.
func (s *Server) PruneRows(id string, before time.Time) {
	if f := s.feedOf(id); f != nil {
		f.prune(before)
	}
}

// Row is an activity row as stored.
type Row = json.RawMessage

// Rows returns a workspace's feed, oldest first, including rows not yet
// visible to pollers.
func (s *Server) Rows(id string) []Row {
	f := s.feedOf(id)
	if f == nil {
		return nil
	}
	rows := f.all()
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = Row(r.json)
	}
	return out
}

// Notification is one accepted POST /workspaces/:id/notify.
type Notification struct {
	WorkspaceID string
	Message     string
	Attachments json.RawMessage
	At          time.Time
}

// Notifications returns the notifies a workspace posted, in order.
func (s *Server) Notifications(id string) []Notification {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return append([]Notification(nil), s.notifies[id]...)
}

// A2ACall is one accepted POST /workspaces/:to/a2a.
type A2ACall struct {
	To       string
	CallerID string // X-Workspace-ID, "" for canvas
	Body     json.RawMessage
	Status   int
	At       time.Time
}

// A2ACalls returns accepted A2A posts to workspace to, in order: every
// call that passed the caller checks and carried a JSON object, with the
// status it was answered (200 queued, a relayed push answer, 202, 502,
// 503). CallerID is the caller as the platform resolved it (X-Workspace-ID,
// or on New the workspace owning the bearer), "" for a canvas caller. Body
// is the normalised JSON-RPC request.
func (s *Server) A2ACalls(to string) []A2ACall {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return append([]A2ACall(nil), s.a2aCalls[to]...)
}

// RecordedRequest is one request the server received.
type RecordedRequest struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	Status int
	At     time.Time
	// Done is when the answer ended (for an event stream, when it
	// closed); zero while it is being answered.
	Done time.Time
}

// Requests returns every request received so far, in order (the last
// 20,000 unless WithRequestLogLimit says otherwise; nil with
// WithoutRequestLog). Status is 0 for a request still being answered
// before its header was written, and for dropped connections.
func (s *Server) Requests() []RecordedRequest {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	out := make([]RecordedRequest, 0, len(s.requests))
	n := len(s.requests)
	for i := 0; i < n; i++ {
		out = append(out, *s.requests[(s.reqStart+i)%n])
	}
	return out
}

// WorkspaceStatus is the double's view of a workspace.
type WorkspaceStatus struct {
	Status        string
	DeliveryMode  string
	URL           string
	Registrations int
	// LastHeartbeat is the last accepted heartbeat body.
	LastHeartbeat json.RawMessage
	Heartbeats    int
	// ActiveTasks and CurrentTask are the last heartbeat's; Busy is the
	// platform's is_busy (Gen2026_08; false before).
	ActiveTasks int
	CurrentTask string
	Busy        bool
}

// Status returns the double's view of workspace id (the zero value for an
// unknown id). Status is "removed" after Delete.
func (s *Server) Status(id string) WorkspaceStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w := s.workspaces[id]
	if w == nil {
		return WorkspaceStatus{}
	}
	st := w.status
	if w.removed {
		st = "removed"
	}
	return WorkspaceStatus{
		Status:        st,
		DeliveryMode:  w.deliveryMode,
		URL:           w.url,
		Registrations: w.registrations,
		LastHeartbeat: append(json.RawMessage(nil), w.lastHeartbeat...),
		Heartbeats:    w.heartbeats,
		ActiveTasks:   w.activeTasks,
		CurrentTask:   w.currentTask,
		Busy:          w.busy,
	}
}

// SetStatus forces a workspace's status, for example "offline" or
// "awaiting_agent" as the platform's liveness sweep does after 90 s
// without a heartbeat.
func (s *Server) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil && !w.removed {
		w.status = status
	}
}

// SetSecret sets a workspace secret returned by GET
// /workspaces/:id/secrets/values.
func (s *Server) SetSecret(id, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.secrets[key] = value
	}
}

// SetGlobalSecret sets a global secret, merged under every workspace's
// own secrets by GET /workspaces/:id/secrets/values.
func (s *Server) SetGlobalSecret(key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.globals[key] = value
}

// InboundSecret returns the workspace's platform_inbound_secret (New).
func (s *Server) InboundSecret(id string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if w := s.workspaces[id]; w != nil {
		return w.secret
	}
	return ""
}

// Fault is an injected failure. The first Count matching requests get it
// (Count 0 means every matching request until ClearFaults).
type Fault struct {
	// Method, PathPrefix and QueryContains (a part of the raw query)
	// select requests ("" matches any).
	Method        string
	PathPrefix    string
	QueryContains string
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
	// AfterHandler lets the real handler run first (its effects, such as
	// the row a notify writes, happen) and then answers Status and Body in
	// place of its answer: a platform that did the work and failed to say
	// so.
	AfterHandler bool
	// Rate, when above 0, applies the fault to that fraction (0..1) of the
	// matching requests, drawn from the server's seeded generator; a
	// request it passes over is checked against the next faults.
	Rate  float64
	Count int
}

// InjectFault adds a fault. Faults are checked in the order they were
// added, before the rate limiter; the first that matches applies.
func (s *Server) InjectFault(f Fault) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults = append(s.faults, &faultState{Fault: f, left: f.Count})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults = nil
}
