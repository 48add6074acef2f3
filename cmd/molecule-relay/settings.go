package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// settingGroup is a titled group of settings in a command's help.
type settingGroup struct {
	title string
	vars  []setting
}

// setting is one environment variable and what it is for, in a few words.
type setting struct{ env, help string }

// The settings, grouped as a command's help shows them. A variable of
// config.Config missing here still shows, under "Other settings", so the
// help never hides one.
var (
	groupPlatform = settingGroup{"Platform and workspaces", []setting{
		{"MOLECULE_PLATFORM_URL", "platform base URL, e.g. https://acme.moleculesai.app"},
		{"MOLECULE_WORKSPACE_ID", "one workspace: its id"},
		{"MOLECULE_WORKSPACE_TOKEN", "one workspace: its token"},
		{"MOLECULE_WORKSPACE_TOKEN_FILE", "one workspace: its token, from a file of mode 0600"},
		{"MOLECULE_WORKSPACE_IDS", "many workspaces: ids, comma separated"},
		{"MOLECULE_WORKSPACE_TOKENS", "many workspaces: tokens, paired by position"},
		{"MOLECULE_WORKSPACES_FILE", `many workspaces: a file of [{"id","token" or "token_file","platform_url"}] (mode 0600 if it holds tokens)`},
		{"MOLECULE_PLATFORM_URLS", "many tenants: one base URL per workspace of MOLECULE_WORKSPACE_IDS"},
		{"MOLECULE_ORG_ID", "SaaS tenant: X-Molecule-Org-Id"},
		{"MOLECULE_ORG_IDS", "one org id per workspace of MOLECULE_WORKSPACE_IDS"},
		{"MOLECULE_AGENT_NAME", "agent card name"},
		{"MOLECULE_AGENT_DESC", "agent card description"},
	}}
	groupPoller = settingGroup{"Poller", []setting{
		{"MOLECULE_POLL_INTERVAL", "between polls: a duration with its unit (5s, 500ms)"},
		{"MOLECULE_SAFETY_NET_INTERVAL", "with a healthy event stream, between polls (0: every MOLECULE_POLL_INTERVAL)"},
		{"MOLECULE_SSE", "wake on the workspace's event stream (true or false)"},
		{"MOLECULE_PAGE_LIMIT", "activity page size (at most 500)"},
		{"MOLECULE_BACKLOG_WINDOW", "on a cold start, deliver messages this recent (0: none)"},
		{"MOLECULE_BACKLOG_LIMIT", "on a cold start, deliver at most the newest this many (0: no cap)"},
		{"MOLECULE_HEARTBEAT_INTERVAL", "between heartbeats, at most 30s (0: none)"},
		{"MOLECULE_OVERLAP_WINDOW", "recent window re-read for late rows"},
		{"MOLECULE_OVERLAP_EVERY", "how often the whole overlap window is re-read"},
		{"MOLECULE_OVERLAP_FOLLOW_UPS", "quick re-reads after a poll that found messages, comma separated (0: none)"},
		{"MOLECULE_SINGLETON", "another relay answers the workspace: warn, or refuse (stop polling it)"},
		{"MOLECULE_REGISTER", "register each workspace at first start (true or false)"},
		{"MOLECULE_CHECKPOINT", "write the cursor as a checkpoint row on each feed and resume from it on an empty or rolled-back store (true or false)"},
		{"MOLECULE_CHECKPOINT_EVERY", "how often a long-running connect writes its checkpoint (default 1m)"},
		{"MOLECULE_ALLOW_SELF", "deliver messages the agent sent itself (true or false)"},
		{"MOLECULE_PUSH_LISTEN", "old platforms: push ingress address, e.g. :8081"},
		{"MOLECULE_PUSH_URL", "old platforms: public URL of the push ingress"},
		{"MOLECULE_POLLER_GROUP", "share the workspaces with the pollers of this group on one NATS"},
		{"MOLECULE_WORKSPACE_REGISTRY", "take the workspaces from the NATS registry (molecule-relay workspaces), seeded by the settings above"},
		{"MOLECULE_REGISTRY_KEY_FILE", "registry: file (0600) with the AES-256 key that seals the tokens, 32 bytes in base64"},
		{"MOLECULE_REGISTRY_KEY", "registry: the AES-256 key itself, 32 bytes in base64 (one key source only)"},
		{"MOLECULE_REGISTRY_KEY_SECRET", "registry: the key from this AWS Secrets Manager secret (name or ARN), through the Lambda extension"},
		{"PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", "registry: the AWS Parameters and Secrets Lambda Extension's port on localhost (AWS sets it)"},
		{"AWS_SESSION_TOKEN", "registry: the Lambda function's session token, for the extension (Lambda sets it)"},
	}}
	// workspaces changes the registry.
	groupRegistry = settingGroup{"Workspace registry", []setting{
		{"MOLECULE_REGISTRY_KEY_FILE", "file (0600) with the AES-256 key that seals the tokens, 32 bytes in base64"},
		{"MOLECULE_REGISTRY_KEY", "the key itself, 32 bytes in base64 (one key source only)"},
		{"MOLECULE_REGISTRY_KEY_SECRET", "the key from this AWS Secrets Manager secret (name or ARN), through the Lambda extension"},
		{"MOLECULE_PLATFORM_URL", "add, import: the platform URL of a workspace that names none"},
	}}
	// status shows the group's members (and creates its bucket).
	groupStatusGroup = settingGroup{"Poller group", []setting{
		{"MOLECULE_POLLER_GROUP", "show which member of this group polls each workspace"},
	}}
	groupHandler = settingGroup{"Handler (dispatcher)", []setting{
		{"MOLECULE_HANDLER", "echo | exec:PROG [ARGS] | http:URL | openai:BASE_URL"},
		{"MOLECULE_HANDLER_ANSWER", "how exec: and http: answers are read: text or json"},
		{"MOLECULE_HANDLER_ENV", "variables an exec: handler also gets: names or prefixes*, e.g. ANTHROPIC_API_KEY,OPENAI_*"},
		{"MOLECULE_HANDLER_TIMEOUT", "bound of one handler call"},
		{"MOLECULE_FILES_DIR", "where attachments handed to the handler are kept, or off"},
		{"MOLECULE_FILES_MAX_BYTES", "cap of one attachment"},
		{"MOLECULE_CONCURRENCY", "handlers running at once"},
		{"MOLECULE_REPLY_TO_REPLIES", "answer messages that are replies (true or false)"},
		{"MOLECULE_MAX_HOPS", "relay replies allowed in one conversation"},
		{"MOLECULE_HISTORY_TURNS", "turns of memory given to the handler (0: off)"},
		{"MOLECULE_HISTORY_MAX_BYTES", "bound of one conversation's stored turns"},
		{"MOLECULE_HISTORY_TTL", "how long a conversation is kept after its last turn"},
		{"MOLECULE_AGENT_API_LISTEN", "agent API loopback address, or off"},
		{"MOLECULE_AGENT_API_SECRETS", "let handlers read workspace secrets (true or false)"},
		{"MOLECULE_ASK_TIMEOUT", "default wait for a peer's answer"},
		{"MOLECULE_MCP_ANSWER_TIMEOUT", "mcp: wait for Claude's answer to one message"},
		{"OPENAI_API_KEY", "openai: handler: API key"},
		{"MOLECULE_OPENAI_MODEL", "openai: handler: model"},
		{"MOLECULE_SYSTEM_PROMPT", "openai: handler: system prompt"},
	}}
	groupReplier = settingGroup{"Replier", []setting{
		{"MOLECULE_REPLY_CONCURRENCY", "replies posted at once"},
		{"MOLECULE_DIRECT_POST", "a dispatcher posts its replies itself when the replier is in the process (true or false)"},
		{"MOLECULE_A2A_TIMEOUT", "X-Timeout of a reply to a peer (5s..30m)"},
		{"MOLECULE_RECONCILE_SKEW", "clock skew allowed when reconciling a notify"},
	}}
	groupNATS = settingGroup{"NATS", []setting{
		{"NATS_URL", "server or cluster; empty: an embedded server"},
		{"NATS_STORE_DIR", "embedded server's store (default: one per workspace set in the user's state directory)"},
		{"MOLECULE_STATE_DIR", "base of the default store (default ~/.local/state/molecule-relay); mcp: the channel's state directory"},
		{"NATS_EMBEDDED_PORT", "embedded server's port (-1: a free one)"},
		{"NATS_SYNC_INTERVAL", "embedded server's fsync: always, or a duration"},
		{"NATS_CREDS", "credentials file"},
		{"NATS_NKEY", "nkey seed file"},
		{"NATS_USER", "user name"},
		{"NATS_PASSWORD", "password"},
		{"NATS_TOKEN", "token"},
		{"NATS_TLS_CA", "CA bundle (requires TLS)"},
		{"NATS_TLS_CERT", "client certificate"},
		{"NATS_TLS_KEY", "client certificate's key"},
		{"NATS_CONNECT_TIMEOUT", "bound of the first connection"},
		{"NATS_NAME", "connection name"},
		{"MOLECULE_STREAM_REPLICAS", "replicas of streams and buckets (3 on a cluster)"},
		{"MOLECULE_TOPOLOGY", "ensure (create streams) or lookup (find them only)"},
		{"MOLECULE_STARTUP_TIMEOUT", "how long a starting stage waits for JetStream"},
	}}
	groupLogs = settingGroup{"Logs, metrics and stopping", []setting{
		{"MOLECULE_LOG_LEVEL", "debug, info, warn or error"},
		{"MOLECULE_LOG_FORMAT", "text or json"},
		{"MOLECULE_LOG_MESSAGES", "an info line as each message is received, handled and its reply posted (ids and sizes, never a body); false: at debug"},
		{"MOLECULE_LOG_SLOW_HANDLER", "log a handler still running every this long (0: never)"},
		{"MOLECULE_METRICS_ADDR", "serve /healthz and /metrics here, e.g. :8080"},
		{"MOLECULE_STOP_GRACE", "after SIGTERM or SIGINT, time to finish and post what is in flight (1s..1h)"},
	}}
	groupConsole = settingGroup{"Console", []setting{
		{"MOLECULE_CONSOLE_LISTEN", "serve the operator console here, e.g. 127.0.0.1:8090 (beyond loopback: needs the token)"},
		{"MOLECULE_CONSOLE_TOKEN", "the console's access token (bearer, or its login page)"},
		{"MOLECULE_CONSOLE_READ_ONLY", "refuse the console's actions: replay, purge, forget (true or false)"},
	}}
)

// commandGroups are the setting groups a command's help lists; a command
// not named here lists every group.
func commandGroups(name string) []settingGroup {
	name, _, _ = strings.Cut(name, " ") // "dlq list" → dlq
	switch name {
	case "poll":
		return []settingGroup{groupPlatform, groupPoller, groupNATS, groupLogs, groupConsole}
	case "dispatch":
		// The agent API reaches the platform (peers, interim messages).
		return []settingGroup{groupHandler, groupPlatform, groupNATS, groupLogs, groupConsole}
	case "reply":
		return []settingGroup{groupPlatform, groupReplier, groupNATS, groupLogs, groupConsole}
	case "status":
		return []settingGroup{groupPlatform, groupStatusGroup, groupNATS, groupLogs}
	case "console":
		return []settingGroup{groupConsole, groupNATS, groupLogs}
	case "doctor":
		return []settingGroup{groupPlatform, groupPoller, groupNATS, groupLogs}
	case "dlq", "history":
		return []settingGroup{groupNATS, groupLogs}
	case "workspaces":
		return []settingGroup{groupRegistry, groupNATS, groupLogs}
	case "dev":
		return []settingGroup{groupHandler, groupLogs}
	default: // connect, mcp
		return []settingGroup{groupPlatform, groupPoller, groupHandler, groupReplier, groupNATS, groupLogs, groupConsole}
	}
}

// configVars are the variables of config.Config: env name → default ("" if
// none), read from the flags BindFlags adds.
func configVars() map[string]string {
	fs := flag.NewFlagSet("vars", flag.ContinueOnError)
	config.BindFlags(fs)
	vars := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		name, def := parseBindUsage(f.Usage)
		if name != "" {
			vars[name] = def
		}
	})
	return vars
}

// parseBindUsage reads "sets VAR (default X)", the usage BindFlags gives.
func parseBindUsage(u string) (name, def string) {
	rest, ok := strings.CutPrefix(u, "sets ")
	if !ok {
		return "", ""
	}
	name, def, _ = strings.Cut(rest, " ")
	def = strings.TrimSuffix(strings.TrimPrefix(def, "(default "), ")")
	return name, def
}

// otherVars are MOLECULE_* variables read by something else than the
// CLI's configuration (the Lambda functions, the CI script, the agent
// API's environment for handlers): no warning names them.
var otherVars = []string{
	"MOLECULE_AGENT_API", "MOLECULE_AGENT_TOKEN",
	"MOLECULE_DISPATCHER_FANOUT", "MOLECULE_DISPATCHER_FUNCTION", "MOLECULE_REPLIER_FUNCTION",
	"MOLECULE_DRAIN_IDLE", "MOLECULE_DRAIN_MARGIN", "MOLECULE_NATS_HEALTH_TIMEOUT",
	"MOLECULE_POLLER_WINDOW", "MOLECULE_WAKE_INTERVAL", "MOLECULE_WORKSPACE_TOKENS_SECRET",
	"MOLECULE_RELAY_ARGS", "MOLECULE_RELAY_BIN", "MOLECULE_RELAY_VERSION",
	// The console's browser test (internal/console).
	"MOLECULE_REQUIRE_BROWSER", "MOLECULE_CONSOLE_SCREENSHOTS",
}

// unknownVarWarnings names each MOLECULE_* variable of environ that no part
// of the relay reads, with the closest known one when it is a likely
// misspelling: a mistyped variable would otherwise be silently ignored.
func unknownVarWarnings(environ []string) []string {
	known := configVars()
	for _, v := range otherVars {
		known[v] = ""
	}
	for _, s := range config.ChannelSettings {
		known[s.Name] = ""
	}
	var names []string
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "MOLECULE_") {
			continue
		}
		if _, ok := known[k]; ok {
			continue
		}
		if best := closest(k, names); best != "" {
			out = append(out, k+" is not a setting of molecule-relay (ignored); did you mean "+best+"?")
		} else {
			out = append(out, k+" is not a setting of molecule-relay (ignored)")
		}
	}
	sort.Strings(out)
	return out
}

// closest is the name nearest to s by edit distance of what follows
// MOLECULE_, if near enough to be a misspelling (at most a third of it).
func closest(s string, names []string) string {
	suffix := strings.TrimPrefix(s, "MOLECULE_")
	best, bestD := "", max(1, len(suffix)/3)+1
	for _, n := range names {
		ns, ok := strings.CutPrefix(n, "MOLECULE_")
		if !ok {
			continue
		}
		if d := editDistance(suffix, ns); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// printChannelSettings lists, in the help of connect and mcp, the
// TypeScript channel's variables the relay reads and what they stand for.
func printChannelSettings(w io.Writer) {
	fmt.Fprintf(w, "\nThe TypeScript channel's settings are read too, each standing for the relay's own;\n"+
		"when both names are set they must agree, or the command exits 2:\n")
	for _, s := range config.ChannelSettings {
		fmt.Fprintf(w, "  %-30s %s (%s)\n", s.Name, s.Ours, s.Meaning)
	}
	fmt.Fprintf(w, "  %-30s %s\n", "MOLECULE_STATE_DIR", "mcp: its .env fills in unset variables; the store is its nats folder")
}
