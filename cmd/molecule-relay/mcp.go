package main

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/relay"
)

// mcpAgentName is the mcp command's agent card name when
// MOLECULE_AGENT_NAME is not set: the TypeScript channel's.
const mcpAgentName = "Claude Code (channel)"

// runMCP serves Claude Code over stdin/stdout: the poller and replier run
// all along, the dispatcher (handler kind mcp) while the client is
// connected. Logs go to stderr only: stdout is the protocol.
func runMCP(ctx context.Context, env *cliEnv, args []string) error {
	// A client that died leaves stdout (and stderr) without a reader: a
	// write must fail with EPIPE and end the session, not kill the process
	// holding the lease with SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	var noWait bool
	var withConsole consoleFlag
	menv := *env
	menv.environ = mcpEnviron(env.environ)
	cfg, err := parseConfig(&menv, "mcp", args, config.NeedPlatform, func(fs *flag.FlagSet) {
		withConsole.bind(fs)
		fs.BoolVar(&noWait, "no-wait", false, "exit 3 when another session holds the channel, instead of serving the client and taking over when that session ends")
	})
	if err != nil {
		return err
	}
	withConsole.apply(cfg)
	log := cfg.NewLogger(env.stderr)
	var ids []string
	for _, w := range cfg.Workspaces() {
		ids = append(ids, w.ID)
	}
	return mcpchannel.Run(ctx, mcpchannel.Options{
		Open: func(ctx context.Context) (*relay.Runtime, func(), error) {
			return openServingMetrics(ctx, cfg, log, relay.All)
		},
		Workspaces: ids,
		NoWait:     noWait,
		Logger:     log,
	}, env.stdin, env.stdout)
}

// mcpEnviron is environ with the TypeScript channel's conventions, so a
// user of molecule-mcp-claude-channel keeps their setup:
//   - the .env file in MOLECULE_STATE_DIR (default ~/.claude/channels/molecule)
//     fills in variables the environment does not set;
//   - its other variables (MOLECULE_WORKSPACES_JSON, MOLECULE_POLL_INTERVAL_MS,
//     …) are read by the configuration itself (config.ChannelSettings);
//   - the store defaults to the nats folder of that state directory, one
//     per user rather than one per project directory;
//   - the agent's name defaults to "Claude Code (channel)".
//
// A variable the environment sets wins over the .env file. The two names
// of one setting (ours and the channel's) must agree (config.Load).
func mcpEnviron(environ []string) []string {
	set := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set[k] = v
		}
	}
	out := append([]string(nil), environ...)
	add := func(k, v string) {
		if _, ok := set[k]; !ok {
			set[k] = v
			out = append(out, k+"="+v)
		}
	}
	stateDir := set["MOLECULE_STATE_DIR"]
	if stateDir == "" {
		if home := set["HOME"]; home != "" {
			stateDir = filepath.Join(home, ".claude", "channels", "molecule")
		}
	}
	if stateDir != "" {
		for _, kv := range readDotEnv(filepath.Join(stateDir, ".env")) {
			add(kv[0], kv[1])
		}
	}
	if stateDir != "" {
		// One store per user, whatever project Claude Code runs in: every
		// session shares it, so they see each other (one holds the
		// channel, the next takes over) and messages wait in one place.
		add("NATS_STORE_DIR", filepath.Join(stateDir, "nats"))
		// Attachments where the TypeScript channel puts them.
		add("MOLECULE_FILES_DIR", filepath.Join(stateDir, "inbox"))
	}
	add("MOLECULE_AGENT_NAME", mcpAgentName)
	// Read here, and by no other command: not handed on.
	return slices.DeleteFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "MOLECULE_STATE_DIR=") })
}

var dotEnvLine = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=(.*)$`)

// readDotEnv reads KEY=VALUE lines as the TypeScript channel does (no
// quoting, no export); a missing file is no variables.
func readDotEnv(path string) [][2]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var kvs [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := dotEnvLine.FindStringSubmatch(strings.TrimRight(sc.Text(), "\r")); m != nil {
			kvs = append(kvs, [2]string{m[1], m[2]})
		}
	}
	return kvs
}
