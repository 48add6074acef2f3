// Package config is Molecule Relay's configuration: one struct read from the
// environment (caarlos0/env), with command-line flags that mirror the
// variable names, defaults in the tags, and a validation step that names the
// variable that is wrong. The CLI and the Lambda functions share it.
package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
)

// ErrInvalid is matched by every validation error.
var ErrInvalid = configerr.ErrInvalid

// Seconds is a duration in Go syntax ("1m30s", "500ms", "5s"). A number
// without a unit is refused with the two readings it could have, except
// 0: MOLECULE_POLL_INTERVAL=5000 once meant 5,000 s to the relay and 5 s
// to whoever wrote it thinking of milliseconds (issue 41). The
// TypeScript channel's *_MS and *_SECS variables carry their unit in
// their name and are read in it (ChannelSettings).
type Seconds time.Duration

// UnmarshalText parses "5s", "500ms" or "0".
func (s *Seconds) UnmarshalText(b []byte) error {
	v := strings.TrimSpace(string(b))
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f != 0 {
			return fmt.Errorf("%q has no unit; write %sms or %ss (a number and a unit, like 500ms, 5s or 1m)", v, v, v)
		}
		*s = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration; use a number and a unit, like 500ms, 5s or 1m", v)
	}
	*s = Seconds(d)
	return nil
}

// D returns the value as a time.Duration.
func (s Seconds) D() time.Duration { return time.Duration(s) }

// Durations converts a list of Seconds; an empty list gives an empty,
// non-nil slice (a setting turned off, not left to its default).
func Durations(ss []Seconds) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.D()
	}
	return out
}

// String formats the duration.
func (s Seconds) String() string { return time.Duration(s).String() }

// Config is everything a stage or the CLI can be configured with. Every
// field has an environment variable; the CLI's flags mirror them
// (MOLECULE_POLL_INTERVAL ↔ --poll-interval, NATS_URL ↔ --nats-url).
type Config struct {
	// PlatformURL is the platform's tenant root URL: every workspace's,
	// unless PlatformURLs is set, and then MOLECULE_WORKSPACE_ID's only.
	PlatformURL string `env:"MOLECULE_PLATFORM_URL"`
	// PlatformURLs configures one platform base URL per workspace of
	// WorkspaceIDs, comma separated, paired by position: workspaces spread
	// over several tenants, each with its own rate budget, tenant headers
	// and event stream. If not set, every workspace is on PlatformURL.
	PlatformURLs []string `env:"MOLECULE_PLATFORM_URLS" envSeparator:","`
	// WorkspaceID and WorkspaceToken configure a single workspace.
	WorkspaceID    string `env:"MOLECULE_WORKSPACE_ID"`
	WorkspaceToken string `env:"MOLECULE_WORKSPACE_TOKEN"`
	// WorkspaceTokenFile is read when WorkspaceToken is empty. It must not
	// be readable by group or others (mode 0600).
	WorkspaceTokenFile string `env:"MOLECULE_WORKSPACE_TOKEN_FILE"`
	// WorkspaceIDs and WorkspaceTokens configure many workspaces, comma
	// separated, paired by position.
	WorkspaceIDs    []string `env:"MOLECULE_WORKSPACE_IDS" envSeparator:","`
	WorkspaceTokens []string `env:"MOLECULE_WORKSPACE_TOKENS" envSeparator:","`
	// WorkspacesFile is a file in MOLECULE_WORKSPACES_JSON's shape, for
	// more workspaces than a variable holds (128 KiB on Linux, about
	// 3,000 ids). An entry names its token by "token" (then the file must
	// have mode 0600) or "token_file". If not set, none is read.
	WorkspacesFile string `env:"MOLECULE_WORKSPACES_FILE"`
	// OrgID is sent as X-Molecule-Org-Id (SaaS tenants): by every
	// workspace, unless OrgIDs is set, and then by MOLECULE_WORKSPACE_ID
	// only. It is sent with Origin; the platform then counts all the
	// workspaces' requests in one rate-limit bucket, and the relay paces
	// them with one shared budget.
	OrgID string `env:"MOLECULE_ORG_ID"`
	// OrgIDs configures one X-Molecule-Org-Id per workspace of
	// WorkspaceIDs, comma separated, paired by position (an empty entry
	// sends none), for workspaces on several SaaS tenants. If not set,
	// every workspace sends OrgID.
	OrgIDs []string `env:"MOLECULE_ORG_IDS" envSeparator:","`
	// AgentName is the agent card's name. If not set, "molecule-relay"
	// (mcp: "Claude Code (channel)", the TypeScript channel's).
	AgentName string `env:"MOLECULE_AGENT_NAME" envDefault:"molecule-relay"`
	// AgentDescription is the agent card's description. If not set, the
	// card has none.
	AgentDescription string `env:"MOLECULE_AGENT_DESC"`
	// PollInterval between polls in long-running mode: a duration with its
	// unit (a bare number other than 0 is refused; the TypeScript
	// channel's MOLECULE_POLL_INTERVAL_MS takes milliseconds). After a
	// failed poll (NATS or platform error) the next comes sooner: 250 ms,
	// doubling up to the interval. Default 5s.
	PollInterval Seconds `env:"MOLECULE_POLL_INTERVAL" envDefault:"5s"`
	// SafetyNetInterval is the poll period, with SSE, while a workspace's
	// event stream is proven healthy and no message arrived lately: the poll
	// is then a safety net for an event the stream missed, which it finds
	// within 1.1 × this (poller.Config.SafetyNetInterval). Proven healthy:
	// the platform echoed the last heartbeat on it. Any event, published
	// row, failure or silent stream returns the poll to PollInterval. 0
	// keeps the poll at PollInterval. Default 2m; 0..15m.
	SafetyNetInterval Seconds `env:"MOLECULE_SAFETY_NET_INTERVAL" envDefault:"2m"`
	// PageLimit is the activity page size (max 500). Default 100.
	PageLimit int `env:"MOLECULE_PAGE_LIMIT" envDefault:"100"`
	// BacklogWindow: on a cold start (an empty store) or a lost cursor,
	// deliver the messages queued in this window, oldest first; 0 only
	// seeds the cursor. On a cold start, messages queued before the
	// workspace's newest own reply on its feed are taken as answered (an
	// earlier relay or client posted it) and a checkpoint, when there is
	// one, is resumed from instead. Default 72h: a laptop closed from
	// Friday evening to Monday morning (about 64 h) loses nothing; the
	// platform keeps unacknowledged rows up to 30 days, so the bound is a
	// choice of ours (docs/operations.md "Cold start"). The TypeScript channel's
	// MOLECULE_POLL_WINDOW_SECS stands for it. At most 720h.
	BacklogWindow Seconds `env:"MOLECULE_BACKLOG_WINDOW" envDefault:"72h"`
	// BacklogLimit caps the messages a cold start delivers from the
	// window: the newest BacklogLimit, oldest first; one WARN line counts
	// those left out. 0: no cap. Default 100, the TypeScript channel's
	// count (which drops the rest without a word).
	BacklogLimit int `env:"MOLECULE_BACKLOG_LIMIT" envDefault:"100"`
	// OverlapWindow is the recent window re-read to catch late-committed
	// rows. Default 2m.
	OverlapWindow Seconds `env:"MOLECULE_OVERLAP_WINDOW" envDefault:"2m"`
	// OverlapEvery is how often the whole overlap window is re-read.
	// Default 30s; shorter than OverlapWindow.
	OverlapEvery Seconds `env:"MOLECULE_OVERLAP_EVERY" envDefault:"30s"`
	// OverlapFollowUps are quick re-reads after a poll that published
	// messages, this long after it (comma separated), each from where the
	// previous re-read looked (less 2 s) up to the cursor, so a row
	// committed behind the cursor is delivered within about a second; an
	// idle workspace gets none. They also follow an event-stream wake-up
	// that finds nothing after the cursor (at most two a second), and none
	// is made while the token's rate budget is low. 0 turns them off.
	// Default 250ms,1s,3s.
	OverlapFollowUps []Seconds `env:"MOLECULE_OVERLAP_FOLLOW_UPS" envSeparator:"," envDefault:"250ms,1s,3s"`
	// AllowSelf delivers messages the agent sent itself. Default false.
	AllowSelf bool `env:"MOLECULE_ALLOW_SELF"`
	// Register registers each workspace once at first start. Default true.
	Register bool `env:"MOLECULE_REGISTER" envDefault:"true"`
	// HeartbeatInterval is how often each workspace heartbeats in
	// long-running mode (one per --once run). 0 sends none: for an
	// operator who heartbeats the workspace from elsewhere; without one
	// the platform shows the workspace offline after about 90 s, messages
	// still queue and are delivered. Default 30s, also the maximum. The
	// TypeScript channel's MOLECULE_HEARTBEAT_INTERVAL_MS stands for it.
	HeartbeatInterval Seconds `env:"MOLECULE_HEARTBEAT_INTERVAL" envDefault:"30s"`
	// SSE holds the workspace event stream for instant wake-ups in
	// long-running mode. Default true.
	SSE bool `env:"MOLECULE_SSE" envDefault:"true"`
	// Checkpoint: the relay writes its cursor as a checkpoint row on each
	// workspace's own feed (connect --once at the end of a clean run; a
	// long-running connect every CheckpointEvery and at a clean stop),
	// and a run whose store has no cursor, or one behind the checkpoint (a
	// restored or rolled-back store), resumes from the newest checkpoint.
	// Default true.
	Checkpoint bool `env:"MOLECULE_CHECKPOINT" envDefault:"true"`
	// CheckpointEvery is how often a long-running connect writes a
	// checkpoint, when its cursor moved and every message up to it was
	// answered or dead-lettered. A relay killed AND its store lost answers
	// again at most what it answered since its last checkpoint. Default 1m.
	CheckpointEvery Seconds `env:"MOLECULE_CHECKPOINT_EVERY" envDefault:"1m"`

	// Handler is the dispatcher's handler spec: echo, exec:<prog> [args],
	// http:<url>, openai:<base url>. Default "echo".
	Handler string `env:"MOLECULE_HANDLER" envDefault:"echo"`
	// HandlerEnv names the variables of the relay's environment an exec:
	// handler gets besides PATH, HOME, LANG and TZ, comma separated: a
	// name (ANTHROPIC_API_KEY) or a prefix ending in * (OPENAI_*). The
	// relay's own secrets are never passed: naming one is refused, a
	// prefix leaves them out (handler_env.go). If not set, none.
	HandlerEnv []string `env:"MOLECULE_HANDLER_ENV" envSeparator:","`
	// HandlerEnviron is HandlerEnv resolved against the environment Load
	// read: the KEY=value entries an exec: handler gets. Set by Load.
	HandlerEnviron []string
	// HandlerTimeout bounds one handler call. Default 5m.
	HandlerTimeout Seconds `env:"MOLECULE_HANDLER_TIMEOUT" envDefault:"5m"`
	// Singleton is what a relay does when it finds a reply on a
	// workspace's feed that it did not post (another relay answers the
	// same workspace): "warn" logs it once; "refuse" also stops polling
	// that workspace (the relay exits when it polls no other), so a
	// message is never answered twice, at the price of none being
	// answered by this relay until an operator acts. A reply posted by
	// another process on the same NATS only warns of the double poll
	// (docs/ci.md, "Two relays"). Default warn.
	Singleton string `env:"MOLECULE_SINGLETON" envDefault:"warn"`
	// StopGrace is how long a long-running command (connect, poll,
	// dispatch, reply, mcp, the workers) takes to stop after SIGTERM or
	// SIGINT: it takes no new work, lets the handlers in flight finish,
	// posts their replies and exits inside it; a handler still running
	// near its end is cut and its message handed back. Keep it below the
	// supervisor's own grace (Kubernetes' terminationGracePeriodSeconds,
	// 30 s by default). Default 25s; 1s..1h. mcp uses at most 350 ms
	// (Claude Code's SIGKILL follows its SIGINT at 500 ms).
	StopGrace Seconds `env:"MOLECULE_STOP_GRACE" envDefault:"25s"`
	// MCPAnswerTimeout is how long the mcp command waits for Claude to
	// answer or dismiss one message before it is shown again (it is the
	// mcp dispatcher's handler timeout). Default 1h.
	MCPAnswerTimeout Seconds `env:"MOLECULE_MCP_ANSWER_TIMEOUT" envDefault:"1h"`
	// HandlerAnswer is how exec: and http: answers are read: text, or
	// json for structured answers (docs/handlers.md "Structured answers"). Default
	// text.
	HandlerAnswer string `env:"MOLECULE_HANDLER_ANSWER" envDefault:"text"`
	// Agent API settings (MOLECULE_AGENT_API_*; internal/agentapi).
	Settings
	// Concurrency is how many handlers run at once per dispatcher. Default
	// DefaultConcurrency (16), set by Load.
	Concurrency int `env:"MOLECULE_CONCURRENCY"`
	// ReplyConcurrency is how many replies are posted at once. Default
	// DefaultConcurrency (16), set by Load.
	ReplyConcurrency int `env:"MOLECULE_REPLY_CONCURRENCY"`
	// A2ATimeout is the X-Timeout of a reply to a peer: how long the
	// platform waits for a push-mode peer before queueing the message.
	// Default 10m; 5s..30m (the platform's own ceiling is 30 minutes).
	// The replier waits 10 s longer, and a Lambda drain shortens it to fit.
	A2ATimeout Seconds `env:"MOLECULE_A2A_TIMEOUT" envDefault:"10m"`
	// AskTimeout bounds a handler's wait for a peer's answer to its
	// question when the question sets none (internal/delegate); the handler's
	// own deadline bounds it too. Default 2m; 1s..55m (the ask record
	// lives 1 hour).
	AskTimeout Seconds `env:"MOLECULE_ASK_TIMEOUT" envDefault:"2m"`
	// ReconcileSkew widens the feed window searched for a notify whose
	// outcome was unknown, on both sides, by the clock difference allowed
	// between this host and the platform. Default 2m.
	ReconcileSkew Seconds `env:"MOLECULE_RECONCILE_SKEW" envDefault:"2m"`
	// ReplyToReplies lets the handler answer messages that are themselves
	// replies (in_reply_to set, or a peer's role "agent" message):
	// agent-to-agent conversations. Default false.
	ReplyToReplies bool `env:"MOLECULE_REPLY_TO_REPLIES"`
	// MaxHops caps relay replies in one conversation. Default 3.
	MaxHops int `env:"MOLECULE_MAX_HOPS" envDefault:"3"`
	// DirectPost lets a dispatcher post its replies itself, in its own
	// slot, through the replier of the same process (connect, dev), instead
	// of handing them over through the reply stream; a reply it cannot post
	// at once (rate budget at the reserve, a refusal that may pass, an
	// unknown outcome) goes to the stream as before, and one the platform
	// refuses for good (a 4xx such as 403) is dead-lettered from the
	// dispatcher's slot without a second post. Canvas replies only: a
	// reply to a peer always goes through the stream (its /a2a may wait
	// minutes for a push-mode peer). Without a replier in the process
	// (dispatch alone, Lambda) it has no effect (docs/architecture.md,
	// "Direct posting"). Default true.
	DirectPost bool `env:"MOLECULE_DIRECT_POST" envDefault:"true"`
	// HistoryTurns is how many recent turns of each conversation are kept
	// and given to the handler (conversation memory, in the NATS stream
	// MOLECULE_MEMORY); 0 turns memory off. Default 20.
	HistoryTurns int `env:"MOLECULE_HISTORY_TURNS" envDefault:"20"`
	// HistoryMaxBytes bounds one conversation's stored turns; the oldest
	// are dropped first, and one turn's text is cut to a quarter of it.
	// Default 65536.
	HistoryMaxBytes int `env:"MOLECULE_HISTORY_MAX_BYTES" envDefault:"65536"`
	// HistoryTTL is how long a recorded turn is kept (the memory stream's
	// MaxAge): a conversation silent that long is gone whole. Default 168h
	// (7 days).
	HistoryTTL Seconds `env:"MOLECULE_HISTORY_TTL" envDefault:"168h"`
	// FilesDir is where the dispatcher holds the attachments it hands its
	// handler (internal/filecache, docs/files.md): "off" hands over the
	// URIs only. If not set, the user's cache directory's
	// molecule-relay/files (mcp: the state directory's inbox, as the
	// TypeScript channel).
	FilesDir string `env:"MOLECULE_FILES_DIR"`
	// FilesMaxBytes caps one attachment held or uploaded (at most 100 MB,
	// the platform's); a larger one reaches the handler
	// with the reason. Default 26214400 (25 MiB, the TypeScript channel's
	// cap); the platform itself takes up to 100 MB.
	FilesMaxBytes int64 `env:"MOLECULE_FILES_MAX_BYTES" envDefault:"26214400"`
	// OpenAIAPIKey is the openai: handler's API key, sent as a bearer
	// token. If not set, none (a local Ollama needs none).
	OpenAIAPIKey string `env:"OPENAI_API_KEY"`
	// OpenAIModel is the model the openai: handler names in its request.
	OpenAIModel string `env:"MOLECULE_OPENAI_MODEL"`
	// SystemPrompt is the openai: handler's system message, sent before
	// the conversation's turns. If not set, none.
	SystemPrompt string `env:"MOLECULE_SYSTEM_PROMPT"`

	// PollerGroup makes this process's poller a member of the named
	// group: the pollers (poll or connect processes) on one NATS that name
	// the same group, each configured with the same workspaces, divide
	// them among themselves, each workspace polled by one live member; a
	// dead member's workspaces move to the others within about 5 s
	// (internal/pollgroup, docs/architecture.md "Growing past one
	// machine"). Letters, digits, - and _, at most 64. If not set, this
	// poller polls every configured workspace.
	PollerGroup string `env:"MOLECULE_POLLER_GROUP"`

	// WorkspaceRegistry makes the workspace registry (the NATS bucket
	// molecule_workspaces, internal/registry, docs/workspace-registry.md)
	// the source of the workspace set: the static workspace settings seed
	// it at the start, `molecule-relay workspaces` changes it, and a
	// running relay starts and stops workspaces as it changes. Needs
	// one key source: RegistryKeyFile, RegistryKey or RegistryKeySecret.
	// If not set, false: the static settings alone.
	WorkspaceRegistry bool `env:"MOLECULE_WORKSPACE_REGISTRY"`
	// RegistryKeyFile names a file (mode 0600) holding the registry's
	// AES-256 key, 32 bytes in base64. At most one of it, RegistryKey and
	// RegistryKeySecret is set.
	RegistryKeyFile string `env:"MOLECULE_REGISTRY_KEY_FILE"`
	// RegistryKey is the registry's AES-256 key, 32 bytes in base64.
	RegistryKey string `env:"MOLECULE_REGISTRY_KEY"`
	// RegistryKeySecret names an AWS Secrets Manager secret (its name or
	// ARN) whose SecretString is the registry's key, 32 bytes in base64,
	// read at start through the AWS Parameters and Secrets Lambda
	// Extension (a Lambda function with its layer; template.yaml's
	// RegistryKeySecretArn).
	RegistryKeySecret string `env:"MOLECULE_REGISTRY_KEY_SECRET"`
	// SecretsExtensionPort is the extension's port on localhost; AWS sets
	// it when it changes it. Default 2773.
	SecretsExtensionPort int `env:"PARAMETERS_SECRETS_EXTENSION_HTTP_PORT" envDefault:"2773"`
	// AWSSessionToken is the function's session token (Lambda sets it),
	// which the extension requires of every read. Never logged.
	AWSSessionToken string `env:"AWS_SESSION_TOKEN"`

	// NATS connection (NATS_URL empty: embedded server).
	NATS broker.Config
	// StateDir replaces the per-user state directory as the base of the
	// embedded server's default store: StateDir/<platform host>-<first
	// workspace>-<hash of the workspaces>/nats (broker.StoreLocation). If
	// not set, $XDG_STATE_HOME/molecule-relay, ~/.local/state/molecule-relay
	// or, on macOS, ~/Library/Application Support/molecule-relay. The mcp
	// command reads it as the TypeScript channel's state directory.
	StateDir string `env:"MOLECULE_STATE_DIR"`
	// Replicas of streams and buckets (3 on a cluster). Default 1.
	Replicas int `env:"MOLECULE_STREAM_REPLICAS" envDefault:"1"`
	// Topology: "ensure" creates or updates the streams, consumers and
	// buckets at start-up (a stage run alone, poll, dispatch or reply:
	// those it uses, and the dead-letter stream); "lookup" only finds
	// them, for stage users of a
	// least-privilege cluster that may not create anything (an admin ran
	// `molecule-relay status` first). Default ensure.
	Topology string `env:"MOLECULE_TOPOLOGY" envDefault:"ensure"`
	// StartupTimeout is how long a starting stage waits for JetStream to
	// answer for its topology (streams, consumers, buckets): a cluster
	// without quorum, or electing leaders after a node was lost, answers
	// nothing for seconds. The stage logs what it waits for and retries;
	// only after StartupTimeout does it exit (code 1), naming what is
	// missing.
	// Default 3m.
	StartupTimeout Seconds `env:"MOLECULE_STARTUP_TIMEOUT" envDefault:"3m"`

	// LogLevel: debug, info, warn, error. Default info.
	LogLevel string `env:"MOLECULE_LOG_LEVEL" envDefault:"info"`
	// LogFormat: text, or json for machines. Default text.
	LogFormat string `env:"MOLECULE_LOG_FORMAT" envDefault:"text"`
	// LogMessages logs an info line as each message is received, handled
	// (in how long) and its reply posted (by notify or a2a): ids,
	// workspace, kind and sizes, never a body or a token. If false, those
	// lines are at debug; a dead letter is logged at warn either way.
	// Default true.
	LogMessages bool `env:"MOLECULE_LOG_MESSAGES" envDefault:"true"`
	// LogSlowHandler logs a handler still running every LogSlowHandler
	// (the message's ids and how long it has run), so a hung handler is
	// seen before its timeout. 0: never. Default 30s.
	LogSlowHandler Seconds `env:"MOLECULE_LOG_SLOW_HANDLER" envDefault:"30s"`
	// MetricsAddr serves /livez, /healthz and /metrics for long-running
	// workers when set, e.g. ":8080" (docs/operations.md, "Metrics"). A
	// Lambda build refuses it.
	MetricsAddr string `env:"MOLECULE_METRICS_ADDR"`
	// ConsoleListen serves the operator console (internal/console) on
	// this address, e.g. "127.0.0.1:8090", from connect, the stage
	// commands and mcp. A non-loopback address needs ConsoleToken. If not
	// set, no console (the console command defaults to 127.0.0.1:8090).
	ConsoleListen string `env:"MOLECULE_CONSOLE_LISTEN"`
	// ConsoleToken is asked of every console request (a bearer token, or
	// once on its login page). If not set, the console serves loopback
	// only.
	ConsoleToken string `env:"MOLECULE_CONSOLE_TOKEN"`
	// ConsoleReadOnly refuses the console's actions (replay, purge,
	// forget). Default false.
	ConsoleReadOnly bool `env:"MOLECULE_CONSOLE_READ_ONLY"`

	// PushListen is the address the push ingress listens on, e.g. ":8081",
	// for platforms without poll mode (OLD, 2026-04): each workspace is
	// registered in push mode and the platform POSTs its messages here.
	// Set together with PushURL. If not set, no push ingress (poll mode).
	PushListen string `env:"MOLECULE_PUSH_LISTEN"`
	// PushURL is the public http(s) base URL under which the platform
	// reaches PushListen, e.g. https://agent.example.com. Set together
	// with PushListen.
	PushURL string `env:"MOLECULE_PUSH_URL"`
}

// Workspace is one configured workspace.
type Workspace struct {
	ID    string
	Token string
	// PlatformURL is the base URL of the tenant the workspace is on.
	PlatformURL string
	// OrgID is the X-Molecule-Org-Id its requests carry; "" sends none.
	OrgID string
}

// String hides the token.
func (w Workspace) String() string { return w.ID }

// Workspaces returns the configured workspaces (single and many forms
// combined), after Validate.
func (c *Config) Workspaces() []Workspace {
	var out []Workspace
	if c.WorkspaceID != "" {
		out = append(out, Workspace{ID: c.WorkspaceID, Token: c.WorkspaceToken, PlatformURL: c.PlatformURL, OrgID: c.OrgID})
	}
	for i, id := range c.WorkspaceIDs {
		if i >= len(c.WorkspaceTokens) {
			continue
		}
		w := Workspace{ID: id, Token: c.WorkspaceTokens[i], PlatformURL: c.PlatformURL, OrgID: c.OrgID}
		if len(c.PlatformURLs) > 0 {
			w.PlatformURL = ""
			if i < len(c.PlatformURLs) {
				w.PlatformURL = c.PlatformURLs[i]
			}
		}
		if len(c.OrgIDs) > 0 {
			w.OrgID = ""
			if i < len(c.OrgIDs) {
				w.OrgID = c.OrgIDs[i]
			}
		}
		out = append(out, w)
	}
	return out
}

// Requirement says which parts of the configuration a command needs.
type Requirement int

const (
	// NeedPlatform: the platform URL and at least one workspace.
	NeedPlatform Requirement = 1 << iota
	// NeedHandler: a handler spec.
	NeedHandler
)

// Validate checks the configuration for what a command needs, reading the
// token file if one is configured. Errors match ErrInvalid and name the
// variable.
func (c *Config) Validate(need Requirement) error {
	if need&NeedPlatform != 0 {
		if err := c.validatePlatformURLs(); err != nil {
			return err
		}
		if err := c.readTokenFile(); err != nil {
			return err
		}
		if err := c.validateWorkspaces(); err != nil {
			return err
		}
		if err := c.validateTenants(); err != nil {
			return err
		}
	}
	if need&NeedHandler != 0 && strings.TrimSpace(c.Handler) == "" {
		return bad("MOLECULE_HANDLER", "not set; try echo, exec:./agent.sh, http:http://127.0.0.1:8000/reply or openai:http://127.0.0.1:11434")
	}
	if err := c.validateHandlerEnv(); err != nil {
		return err
	}
	if c.HandlerAnswer != "text" && c.HandlerAnswer != "json" {
		return bad("MOLECULE_HANDLER_ANSWER", "%q; use text or json", c.HandlerAnswer)
	}
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if err := c.validatePush(); err != nil {
		return err
	}
	if err := c.validatePollerGroup(); err != nil {
		return err
	}
	if err := c.validateRegistryKey(); err != nil {
		return err
	}
	if c.Topology != "ensure" && c.Topology != "lookup" {
		return bad("MOLECULE_TOPOLOGY", "%q; use ensure or lookup", c.Topology)
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		return bad("MOLECULE_LOG_LEVEL", "%v", err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("MOLECULE_LOG_FORMAT", "%q; use text or json", c.LogFormat)
	}
	if err := c.NATS.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// bad is a Validate error naming the variable that is wrong.
// validateRegistryKey: at most one key source, one with the registry on,
// and what the Secrets Manager source needs.
func (c *Config) validateRegistryKey() error {
	set := c.RegistryKeySources()
	switch {
	case len(set) > 1:
		return bad(set[1], "set together with %s; set exactly one key source", set[0])
	case c.WorkspaceRegistry && len(set) == 0:
		return bad("MOLECULE_REGISTRY_KEY_FILE", "not set, nor MOLECULE_REGISTRY_KEY or MOLECULE_REGISTRY_KEY_SECRET, with MOLECULE_WORKSPACE_REGISTRY=true; the registry seals the tokens with this key: make one with head -c 32 /dev/urandom | base64 > key && chmod 600 key")
	case c.RegistryKeySecret == "":
	case c.AWSSessionToken == "":
		return bad("AWS_SESSION_TOKEN", "not set; MOLECULE_REGISTRY_KEY_SECRET is read through the AWS Parameters and Secrets Lambda Extension, which needs the Lambda function's session token (Lambda sets it; elsewhere use MOLECULE_REGISTRY_KEY_FILE)")
	case c.SecretsExtensionPort < 1 || c.SecretsExtensionPort > 65535:
		return bad("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", "%d is not a port", c.SecretsExtensionPort)
	}
	return nil
}

// RegistryKeySources names the registry key settings that are set.
func (c *Config) RegistryKeySources() []string {
	var set []string
	for _, s := range []struct{ name, v string }{{"MOLECULE_REGISTRY_KEY_FILE", c.RegistryKeyFile}, {"MOLECULE_REGISTRY_KEY", c.RegistryKey}, {"MOLECULE_REGISTRY_KEY_SECRET", c.RegistryKeySecret}} {
		if s.v != "" {
			set = append(set, s.name)
		}
	}
	return set
}

func bad(name, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, name, fmt.Sprintf(format, a...))
}

// readTokenFile reads the token of a single workspace configured without
// one from MOLECULE_WORKSPACE_TOKEN_FILE.
func (c *Config) readTokenFile() error {
	if c.WorkspaceID != "" && c.WorkspaceToken == "" {
		if c.WorkspaceTokenFile == "" {
			return bad("MOLECULE_WORKSPACE_TOKEN", "not set for MOLECULE_WORKSPACE_ID %s (or set MOLECULE_WORKSPACE_TOKEN_FILE)", c.WorkspaceID)
		}
		tok, err := ReadTokenFile(c.WorkspaceTokenFile)
		if err != nil {
			return bad("MOLECULE_WORKSPACE_TOKEN_FILE", "%v", err)
		}
		c.WorkspaceToken = tok
	}
	return nil
}

// validateWorkspaces checks the workspace ids and tokens: at least one,
// paired by position, each id a UUID configured once, each token set.
func (c *Config) validateWorkspaces() error {
	if c.WorkspaceID == "" && len(c.WorkspaceIDs) == 0 && c.WorkspaceRegistry {
		return nil // the registry holds them
	}
	if c.WorkspaceID == "" && len(c.WorkspaceIDs) == 0 {
		return bad("MOLECULE_WORKSPACE_ID", "no workspace configured; set MOLECULE_WORKSPACE_ID and MOLECULE_WORKSPACE_TOKEN, or MOLECULE_WORKSPACE_IDS and MOLECULE_WORKSPACE_TOKENS")
	}
	if len(c.WorkspaceIDs) != len(c.WorkspaceTokens) {
		return bad("MOLECULE_WORKSPACE_TOKENS", "%d tokens for %d ids in MOLECULE_WORKSPACE_IDS; they pair by position", len(c.WorkspaceTokens), len(c.WorkspaceIDs))
	}
	seen := map[string]bool{}
	for i, w := range c.Workspaces() {
		name := "MOLECULE_WORKSPACE_IDS"
		if c.WorkspaceID != "" && i == 0 {
			name = "MOLECULE_WORKSPACE_ID"
		}
		if !isUUID(w.ID) {
			// Not echoed: a token pasted here (or swapped lists)
			// would end up in CI logs.
			return bad(name, "entry %d (%d characters) is not a workspace UUID; are the ids and tokens swapped?", i+1, len(w.ID))
		}
		if seen[w.ID] {
			return bad(name, "workspace %s is configured twice", w.ID)
		}
		seen[w.ID] = true
		if strings.TrimSpace(w.Token) == "" {
			return bad(strings.Replace(name, "_IDS", "_TOKENS", 1), "empty token for workspace %s", w.ID)
		}
	}
	return nil
}

// validateLimits checks the numeric settings against their ranges.
func (c *Config) validateLimits() error {
	switch {
	case c.PollInterval.D() < 100*time.Millisecond:
		return bad("MOLECULE_POLL_INTERVAL", "%s is below the 100ms minimum", c.PollInterval)
	case c.SafetyNetInterval.D() < 0 || c.SafetyNetInterval.D() > 15*time.Minute:
		return bad("MOLECULE_SAFETY_NET_INTERVAL", "%s is outside 0..15m (it bounds how late a message whose event the stream missed is found)", c.SafetyNetInterval)
	case c.PageLimit < 1 || c.PageLimit > 500:
		return bad("MOLECULE_PAGE_LIMIT", "%d is outside 1..500 (the platform caps pages at 500)", c.PageLimit)
	case c.BacklogWindow.D() < 0 || c.BacklogWindow.D() > 30*24*time.Hour:
		return bad("MOLECULE_BACKLOG_WINDOW", "%s is outside 0..720h (the platform keeps rows 30 days at most)", c.BacklogWindow)
	case c.BacklogLimit < 0 || c.BacklogLimit > 100000:
		return bad("MOLECULE_BACKLOG_LIMIT", "%d is outside 0..100000 (0: no cap)", c.BacklogLimit)
	case c.HeartbeatInterval.D() < 0 || c.HeartbeatInterval.D() > 30*time.Second:
		return bad("MOLECULE_HEARTBEAT_INTERVAL", "%s is outside 0..30s (0: none; the platform marks a workspace offline after about 90 s without one)", c.HeartbeatInterval)
	case c.CheckpointEvery.D() < time.Second || c.CheckpointEvery.D() > 24*time.Hour:
		return bad("MOLECULE_CHECKPOINT_EVERY", "%s is outside 1s..24h (each checkpoint is one row on every workspace's feed whose cursor moved)", c.CheckpointEvery)
	case c.OverlapWindow.D() < 0 || c.OverlapWindow.D() > 30*time.Minute:
		return bad("MOLECULE_OVERLAP_WINDOW", "%s is outside 0..30m (it must stay inside the stream's duplicate window)", c.OverlapWindow)
	case c.OverlapEvery.D() < time.Second || (c.OverlapWindow.D() > 0 && c.OverlapEvery.D() >= c.OverlapWindow.D()):
		return bad("MOLECULE_OVERLAP_EVERY", "%s must be at least 1s and shorter than MOLECULE_OVERLAP_WINDOW (%s)", c.OverlapEvery, c.OverlapWindow)
	case len(c.OverlapFollowUps) > 8:
		return bad("MOLECULE_OVERLAP_FOLLOW_UPS", "%d entries; at most 8", len(c.OverlapFollowUps))
	case c.HandlerTimeout.D() < time.Second:
		return bad("MOLECULE_HANDLER_TIMEOUT", "%s is below 1s", c.HandlerTimeout)
	case c.Singleton != "warn" && c.Singleton != "refuse":
		return bad("MOLECULE_SINGLETON", "%q; use warn or refuse", c.Singleton)
	case c.StopGrace.D() < time.Second || c.StopGrace.D() > time.Hour:
		return bad("MOLECULE_STOP_GRACE", "%s is outside 1s..1h", c.StopGrace)
	case c.MCPAnswerTimeout.D() < time.Second:
		return bad("MOLECULE_MCP_ANSWER_TIMEOUT", "%s is below 1s", c.MCPAnswerTimeout)
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return bad("MOLECULE_CONCURRENCY", "%d is outside 1..4096", c.Concurrency)
	case c.ReplyConcurrency < 1 || c.ReplyConcurrency > 4096:
		return bad("MOLECULE_REPLY_CONCURRENCY", "%d is outside 1..4096", c.ReplyConcurrency)
	case c.A2ATimeout.D() < 5*time.Second || c.A2ATimeout.D() > 30*time.Minute:
		return bad("MOLECULE_A2A_TIMEOUT", "%s is outside 5s..30m", c.A2ATimeout)
	case c.AskTimeout.D() < time.Second || c.AskTimeout.D() > 55*time.Minute:
		return bad("MOLECULE_ASK_TIMEOUT", "%s is outside 1s..55m", c.AskTimeout)
	case c.MaxHops < 1:
		return bad("MOLECULE_MAX_HOPS", "%d; must be at least 1", c.MaxHops)
	case c.HistoryTurns < 0 || c.HistoryTurns > 1000:
		return bad("MOLECULE_HISTORY_TURNS", "%d is outside 0..1000 (0 turns memory off)", c.HistoryTurns)
	case c.FilesMaxBytes < 0 || c.FilesMaxBytes > 100<<20:
		return bad("MOLECULE_FILES_MAX_BYTES", "%d is outside 0..104857600 (the platform's cap; 0 is the default)", c.FilesMaxBytes)
	case c.HistoryMaxBytes != 0 && (c.HistoryMaxBytes < 1024 || c.HistoryMaxBytes > 512<<10):
		return bad("MOLECULE_HISTORY_MAX_BYTES", "%d is outside 1024..524288 (a NATS message holds 1 MB)", c.HistoryMaxBytes)
	case c.HistoryTTL.D() != 0 && c.HistoryTTL.D() < time.Minute:
		return bad("MOLECULE_HISTORY_TTL", "%s is below 1m", c.HistoryTTL)
	case c.Replicas < 1 || c.Replicas > 5:
		return bad("MOLECULE_STREAM_REPLICAS", "%d is outside 1..5", c.Replicas)
	case c.StartupTimeout.D() < 0:
		return bad("MOLECULE_STARTUP_TIMEOUT", "%s; must not be negative (0 waits the default 3m)", c.StartupTimeout)
	}
	return nil
}

// validatePollerGroup checks the group name, which is part of KV keys. A
// push workspace is registered with its member's own URL, and is not
// moved: the two do not go together.
func (c *Config) validatePollerGroup() error {
	switch {
	case c.PollerGroup == "":
	case !pollgroup.ValidName.MatchString(c.PollerGroup):
		return bad("MOLECULE_POLLER_GROUP", "%q; use 1 to 64 letters, digits, - or _", c.PollerGroup)
	case c.PushListen != "":
		return bad("MOLECULE_POLLER_GROUP", "set together with MOLECULE_PUSH_LISTEN; a push workspace is not moved between pollers: unset one of them")
	}
	return nil
}

// validatePush checks the push ingress settings: both variables or
// neither, and a base URL (its trailing slash trimmed).
func (c *Config) validatePush() error {
	switch {
	case c.PushListen != "" && c.PushURL == "":
		return bad("MOLECULE_PUSH_URL", "not set although MOLECULE_PUSH_LISTEN is; the public http(s) base URL the platform reaches the push ingress at")
	case c.PushListen == "" && c.PushURL != "":
		return bad("MOLECULE_PUSH_LISTEN", "not set although MOLECULE_PUSH_URL is; the address the push ingress listens on, e.g. :8081")
	case c.PushURL != "":
		u, err := url.Parse(c.PushURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return bad("MOLECULE_PUSH_URL", "%q is not an http(s) base URL", c.PushURL)
		}
		c.PushURL = strings.TrimRight(c.PushURL, "/")
	}
	return nil
}

// ReadTokenFile reads a token file, refusing one that group or others can
// read or write.
func ReadTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o; it must be readable by its owner only: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// ParseLevel parses a log level name.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q; use debug, info, warn or error", s)
	}
	return l, nil
}

// isUUID accepts the canonical 8-4-4-4-12 form only (uuid.Validate
// also takes braces, a urn: prefix and 32 bare hex digits).
func isUUID(s string) bool { return len(s) == 36 && uuid.Validate(s) == nil }
