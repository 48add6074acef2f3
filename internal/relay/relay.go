// Package relay assembles Molecule Relay from its configuration: the NATS
// connection (embedded or external), the JetStream topology, one platform
// client per workspace, the handler, and the three stage cores. The CLI, the
// Lambda functions and long-running workers are thin wrappers around it.
package relay

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/internal/version"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Runtime is an open connection to NATS with the topology ensured and the
// platform clients built. Close it when done.
type Runtime struct {
	Cfg     *config.Config
	Log     *slog.Logger
	Conn    *broker.Conn
	Topo    *events.Topology
	Clients []*molecule.Client

	// reg follows the workspace registry, when it is on (registry.go).
	reg *regState

	stages running
	prom   promState
	// stopTracing flushes and stops the OpenTelemetry SDK (tracing.Setup).
	stopTracing func(context.Context) error
	// push is each workspace's push URL while Run serves the push ingress
	// (ServePush); the poller registers them in push mode.
	push map[string]string

	// Hooks are called by the stage cores built after they are set (the
	// Lambda functions' wake-ups of the next stage).
	Hooks Hooks
	// goHandler, when set (SetHandler), replaces MOLECULE_HANDLER's.
	goHandler handler.Handler

	instanceOnce sync.Once
	instance     string
	// ledger holds the canvas replies this process posts, when the poller
	// and the replier run together (Run, Once): the poller warns about
	// notify rows that are not in it (a second relay on the workspace).
	ledger *poller.NotifyLedger
	// tasks is this process's dispatcher, once built, for the heartbeats'
	// active_tasks and current_task (mcp builds it after the poller).
	tasks liveTasks
	// agentSrv is the agent API, started by the first Dispatcher (agentapi.go).
	agentMu  sync.Mutex
	agentSrv *agentapi.Server
	// files is the attachment cache (files.go).
	filesOnce sync.Once
	files     *filecache.Cache
}

// shareLedger gives the poller and the replier of s one NotifyLedger when
// both run in this process; a poller alone cannot know which replies are
// its relay's. Nor can a member of a poller group: the replies to what it
// polls are posted by any member's replier. With a ledger, this process
// answers the others on its NATS that poll its workspaces (pollers.go);
// call stop when the stages are done.
func (rt *Runtime) shareLedger(s Stages) (stop func()) {
	rt.ledger = nil
	if s.Poll && s.Reply && rt.Cfg.PollerGroup == "" {
		rt.ledger = poller.NewNotifyLedger()
		return rt.answerPollerQuestions()
	}
	return func() {}
}

// Hooks let a deployment react to a stage's progress. Each must be quick
// and safe for concurrent use; nil means not called.
type Hooks struct {
	// OnPublished: a long-running poller (Run) stored n new inbound
	// messages.
	OnPublished func(n int)
	// OnReply: the dispatcher published a reply.
	OnReply func()
}

// InstanceID is this process's relay instance id, sent in heartbeats and
// written in checkpoints.
func (rt *Runtime) InstanceID() string {
	rt.instanceOnce.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		rt.instance = hex.EncodeToString(b[:])
	})
	return rt.instance
}

// Open connects to NATS (starting the embedded server when NATS_URL is
// empty), ensures (or, with MOLECULE_TOPOLOGY=lookup, finds) the whole
// topology and builds one client per configured workspace. cfg must have
// been validated.
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Runtime, error) {
	return OpenStages(ctx, cfg, log, All)
}

// OpenStages is Open for a process that runs only the given stages: with
// MOLECULE_TOPOLOGY=lookup it looks up only what they use, which is all a
// least-privilege stage user may see.
func OpenStages(ctx context.Context, cfg *config.Config, log *slog.Logger, s Stages) (*Runtime, error) {
	stopTracing, err := tracing.Setup(ctx, "molecule-relay")
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry (OTEL_* variables): %w", err)
	}
	conn, err := broker.Connect(ctx, cfg.NATS, log)
	if err != nil {
		_ = stopTracing(ctx)
		return nil, err
	}
	rt := &Runtime{Cfg: cfg, Log: log, Conn: conn, stopTracing: stopTracing}
	if err := rt.ensureTopology(ctx, s); err != nil {
		conn.Close()
		return nil, err
	}
	if rt.Clients, err = newClients(cfg, log); err != nil {
		conn.Close()
		return nil, err
	}
	if cfg.WorkspaceRegistry && (s.Poll || s.Reply) {
		if err := rt.openRegistry(ctx); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return rt, nil
}

// Reconfigure replaces the runtime's configuration and rebuilds its
// platform clients (say, after a workspace token was rotated), keeping the
// NATS connection and the topology. cfg must have been validated and name
// the same NATS server. Stages built before keep their old clients: build
// them again.
func (rt *Runtime) Reconfigure(cfg *config.Config) error {
	clients, err := newClients(cfg, rt.Log)
	if err != nil {
		return err
	}
	rt.Cfg, rt.Clients = cfg, clients
	rt.closeAgentAPI() // the next Dispatcher starts it with the new clients
	return nil
}

// newClients builds one platform client per configured workspace, each on
// its own tenant's base URL with its own tenant headers.
func newClients(cfg *config.Config, log *slog.Logger) ([]*molecule.Client, error) {
	pool, err := raiseFileLimit(len(cfg.Workspaces()))
	if err != nil {
		return nil, err
	}
	hc, streams := platformHTTPClients(cfg, pool)
	var clients []*molecule.Client
	budgets := budgetsByBucket{}
	for _, w := range cfg.Workspaces() {
		c, err := newClient(w, hc, streams, log, budgets.of(w))
		if err != nil {
			return nil, fmt.Errorf("workspace %s: %w", w.ID, err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func newClient(w config.Workspace, hc, streams *http.Client, log *slog.Logger, budget *molecule.RateBudget) (*molecule.Client, error) {
	return molecule.New(molecule.Config{
		PlatformURL:      w.PlatformURL,
		WorkspaceID:      w.ID,
		Token:            w.Token,
		OrgID:            w.OrgID,
		HTTPClient:       hc,
		StreamHTTPClient: streams,
		Logger:           log.With("workspace", w.ID),
		RateBudget:       budget,
		RelayVersion:     version.String(),
	})
}

// budgetsByBucket gives the workspaces that share a platform rate-limit
// bucket one RateBudget (docs/protocol.md §2). Each tenant counts its own
// requests, and NEW keys its buckets by X-Molecule-Org-Id: the workspaces
// of one tenant with one org id share a budget, and the same org id on
// two tenants is two budgets. Without an org id NEW keeps a bucket per
// token, so each client keeps a budget of its own (OLD counts by source
// IP; as before, the clients do not pool their views of it).
type budgetsByBucket map[[2]string]*molecule.RateBudget

func (b budgetsByBucket) of(w config.Workspace) *molecule.RateBudget {
	if w.OrgID == "" {
		return nil
	}
	k := [2]string{w.PlatformURL, w.OrgID}
	if b[k] == nil {
		b[k] = molecule.NewRateBudget()
	}
	return b[k]
}

// ensureTopology creates (or looks up) the streams, consumers and buckets
// the stages s use, waiting up to MOLECULE_STARTUP_TIMEOUT for a cluster
// that has no quorum or is electing leaders (waitJetStream). Each try asks
// the meta leader first (metaLeaderAnswers): what is already there is only
// looked up, and a node without quorum answers some lookups.
func (rt *Runtime) ensureTopology(ctx context.Context, s Stages) error {
	tc := events.TopologyConfig{Replicas: rt.Cfg.Replicas, HistoryTTL: rt.Cfg.HistoryTTL.D(), HistoryTurns: rt.Cfg.HistoryTurns}
	names := s.names()
	what := "JetStream topology on " + rt.Conn.URL()
	find := func(ctx context.Context) error {
		topo, err := events.EnsureTopology(ctx, rt.Conn.JS, tc, names...)
		if err != nil {
			return fmt.Errorf("%s: %w (is JetStream enabled on the server, and may this user create streams?)", what, err)
		}
		rt.Topo = topo
		return nil
	}
	if rt.Cfg.Topology == "lookup" {
		what = "JetStream topology (lookup) on " + rt.Conn.URL()
		find = func(ctx context.Context) error {
			topo, err := events.LookupTopology(ctx, rt.Conn.JS, tc, names...)
			rt.Topo = topo
			return err
		}
	}
	meta := newMetaCheck()
	return waitJetStream(ctx, rt.Log, rt.Cfg.StartupTimeout.D(), what, func(ctx context.Context) error {
		if err := meta.answers(ctx, rt.Conn.JS); err != nil {
			return err
		}
		return find(ctx)
	})
}

// names are the events stage names of s, for EnsureTopology and
// LookupTopology to touch only what those stages use; none for All.
func (s Stages) names() []string {
	if s == All {
		return nil
	}
	var names []string
	if s.Poll {
		names = append(names, events.StagePoller)
	}
	if s.Dispatch {
		names = append(names, events.StageDispatcher)
	}
	if s.Reply {
		names = append(names, events.StageReplier)
	}
	return names
}

// Close flushes and closes the NATS connection (broker.Conn.Close) and
// stops an embedded server.
func (rt *Runtime) Close() {
	rt.closeAgentAPI()
	if rt.reg != nil {
		rt.reg.stopWatch()
	}
	if rt.Conn != nil {
		rt.Conn.Close()
	}
	if rt.stopTracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.stopTracing(ctx)
	}
}

// platformHTTPClients are shared by every workspace's client: one connection
// pool to the platform, sized for the replier's and poller's concurrency
// and for the fleet. Go's default keeps only 2 idle connections per host,
// so concurrent notifies would open and close a connection each (measured:
// 15% more CPU per message, and sockets piling up in TIME_WAIT); and a
// fleet's polls and heartbeats, each workspace on its own timer, overlap
// up to one request per workspace: with fewer idle connections kept than
// that, every overlap closed some and the next opened new ones (measured
// at 1,000 workspaces and 32 idle: 8,529 sockets in TIME_WAIT). An idle
// connection costs only while it exists: the pool grows to the largest
// overlap seen and shrinks after IdleConnTimeout. The event streams, which
// hold a connection each for their whole life, go through streams
// (streamTransport).
// pool caps the idle connections to what the file limit leaves
// (raiseFileLimit).
func platformHTTPClients(cfg *config.Config, pool int) (requests, streams *http.Client) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	idle := min(max(cfg.ReplyConcurrency+cfg.Concurrency, 32, len(cfg.Workspaces())), max(pool, 1))
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 2*idle, idle
	// Request bodies are small JSON (a heartbeat is 400 bytes; a larger
	// notify is written through in pieces), and every event stream holds a
	// connection with its own write buffer for its whole life.
	t.WriteBufferSize = 1 << 10
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: tracing.Transport(t)},
		&http.Client{Transport: tracing.Transport(streamTransport{pooled: t})}
}

// ClientMap returns the clients keyed by workspace id.
func (rt *Runtime) ClientMap() map[string]*molecule.Client {
	m := make(map[string]*molecule.Client, len(rt.Clients))
	for _, c := range rt.Clients {
		m[c.WorkspaceID()] = c
	}
	return m
}

// Handler is the handler SetHandler gave, or builds the configured one.
func (rt *Runtime) Handler() (handler.Handler, error) {
	if rt.goHandler != nil {
		return rt.goHandler, nil
	}
	return NewHandler(rt.Cfg)
}

// NewHandler builds the handler cfg's MOLECULE_HANDLER names.
func NewHandler(cfg *config.Config) (handler.Handler, error) {
	return handler.Parse(cfg.Handler, handler.Options{
		Timeout:            cfg.HandlerTimeout.D(),
		OpenAIAPIKey:       cfg.OpenAIAPIKey,
		OpenAIModel:        cfg.OpenAIModel,
		OpenAISystemPrompt: cfg.SystemPrompt,
		AnswerJSON:         cfg.HandlerAnswer == "json",
		Env:                cfg.HandlerEnviron,
	})
}

// Poller builds the poller stage core.
func (rt *Runtime) Poller() (*poller.Poller, error) { return rt.poller(false) }

// poller builds the poller; batched: fetch CheckpointBatch rows per cycle
// (a checkpointed one-shot run).
func (rt *Runtime) poller(batched bool) (*poller.Poller, error) {
	batch := 0
	if batched {
		batch = CheckpointBatch
	}
	return poller.New(rt.Conn.JS, rt.Topo, poller.Config{
		BatchRows:    batch,
		Workspaces:   rt.Clients,
		Dynamic:      rt.reg != nil,
		PollInterval: rt.Cfg.PollInterval.D(),
		// 0 in the configuration keeps the poll at PollInterval; 0 in
		// poller.Config would take the default.
		SafetyNetInterval: cmp.Or(rt.Cfg.SafetyNetInterval.D(), -1),
		PageLimit:         rt.Cfg.PageLimit,
		BacklogWindow:     rt.Cfg.BacklogWindow.D(),
		BacklogLimit:      rt.Cfg.BacklogLimit,
		// 0 in the configuration sends no heartbeat; 0 in poller.Config
		// would take the default.
		HeartbeatInterval: cmp.Or(rt.Cfg.HeartbeatInterval.D(), -1),
		OverlapWindow:     rt.Cfg.OverlapWindow.D(),
		OverlapEvery:      rt.Cfg.OverlapEvery.D(),
		OverlapFollowUps:  config.Durations(rt.Cfg.OverlapFollowUps),
		AllowSelf:         rt.Cfg.AllowSelf,
		AgentName:         rt.Cfg.AgentName,
		AgentCard:         agentCard(rt.Cfg),
		SkipRegister:      !rt.Cfg.Register,
		SSE:               rt.Cfg.SSE,
		Push:              rt.push,
		Logger:            rt.Log.With("stage", events.StagePoller),
		OnPublished:       rt.Hooks.OnPublished,

		ResumeFromCheckpoint: rt.Cfg.Checkpoint,
		InstanceID:           rt.InstanceID(),
		OwnNotify:            rt.ledger,
		OtherPoller:          rt.otherPoller(),
		RefuseSecondRelay:    rt.Cfg.Singleton == "refuse",
		Tasks:                &rt.tasks,
	})
}

// agentCard is the card registered with a description (MOLECULE_AGENT_DESC),
// or nil: the poller's {"name": MOLECULE_AGENT_NAME}.
func agentCard(cfg *config.Config) any {
	if cfg.AgentDescription == "" {
		return nil
	}
	return map[string]any{"name": cfg.AgentName, "description": cfg.AgentDescription}
}

// Dispatcher builds the dispatcher stage core around h. Its replies go to
// the reply stream (a replier in another process or function posts them);
// see stageCores for a dispatcher with its replier.
func (rt *Runtime) Dispatcher(h handler.Handler) (*dispatcher.Dispatcher, error) {
	return rt.dispatcher(h, nil)
}

// stageCores builds the dispatcher and replier s selects (nil when not). When
// it runs both and MOLECULE_DIRECT_POST is on (the default), the
// dispatcher's runner posts its replies through this replier in the
// message's slot (stage.Config.Direct: replier.Replier.PostDirect),
// skipping the reply stream.
func (rt *Runtime) stageCores(s Stages) (*dispatcher.Dispatcher, *replier.Replier, error) {
	var (
		d *dispatcher.Dispatcher
		r *replier.Replier
	)
	if s.Reply {
		var err error
		if r, err = rt.Replier(); err != nil {
			return nil, nil, err
		}
	}
	if s.Dispatch {
		h, err := rt.Handler()
		if err != nil {
			return nil, nil, err
		}
		var direct stage.ReplyDelivery
		if r != nil && rt.Cfg.DirectPost {
			direct = r
		}
		if d, err = rt.dispatcher(h, direct); err != nil {
			return nil, nil, err
		}
	}
	return d, r, nil
}

func (rt *Runtime) dispatcher(h handler.Handler, direct stage.ReplyDelivery) (*dispatcher.Dispatcher, error) {
	mem, err := rt.Memory()
	if err != nil {
		return nil, err
	}
	agent, err := rt.agentAPI()
	if err != nil {
		return nil, err
	}
	d, err := dispatcher.New(rt.Conn.JS, rt.Topo, h, dispatcher.Config{
		Agent: agent,
		Config: stage.Config{
			Concurrency: rt.Cfg.Concurrency, ConfirmAcks: rt.Cfg.Replicas > 1, Logger: rt.Log, LogMessages: rt.Cfg.LogMessages, // stage.Open names the stage
			Direct: direct, OnReply: rt.Hooks.OnReply, // the runner delivers the replies
		},
		HandlerTimeout: rt.Cfg.HandlerTimeout.D(),
		LogSlowHandler: rt.Cfg.LogSlowHandler.D(),
		MaxHops:        rt.Cfg.MaxHops,
		ReplyToReplies: rt.Cfg.ReplyToReplies,
		ObserveHandler: rt.handlerObserver(),
		Memory:         mem,
		Files:          rt.fileCache(),
		Uploads:        rt.uploader(),
	})
	if err == nil {
		rt.tasks.d.Store(d)
	}
	return d, err
}

// liveTasks is this process's dispatcher for the poller's heartbeats,
// known once it is built (poller.Tasks).
type liveTasks struct {
	d atomic.Pointer[dispatcher.Dispatcher]
}

// Running is the dispatcher's Running; known is false while this process
// has none.
func (l *liveTasks) Running(ws string) (n int, current string, known bool) {
	if d := l.d.Load(); d != nil {
		return d.Running(ws)
	}
	return 0, "", false
}

// Replier builds the replier stage core.
func (rt *Runtime) Replier() (*replier.Replier, error) {
	mem, err := rt.Memory()
	if err != nil {
		return nil, err
	}
	return replier.New(rt.Conn.JS, rt.Topo, rt.startClients(), replier.Config{
		Lookup:        rt.lookup(),
		Config:        stage.Config{Concurrency: rt.Cfg.ReplyConcurrency, ConfirmAcks: rt.Cfg.Replicas > 1, Logger: rt.Log, LogMessages: rt.Cfg.LogMessages}, // stage.Open names the stage
		A2ATimeout:    rt.Cfg.A2ATimeout.D(),
		ReconcileSkew: rt.Cfg.ReconcileSkew.D(),
		Observer:      rt.replyObserver(),
		Memory:        mem,
		BeforeNotify: func() func(string, string) {
			if rt.ledger == nil {
				return nil
			}
			return rt.ledger.Note
		}(),
	})
}

// ErrSomethingFailed is returned by a one-shot run in which a stage failed
// or a message was dead-lettered.
var ErrSomethingFailed = errors.New("relay: one-shot run did not complete cleanly")
