package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/relay/embedded"
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
	if len(args) > 0 && args[0] == "install" {
		return runMCPInstall(ctx, env, args[1:])
	}
	var noWait bool
	var withConsole consoleFlag
	menv := *env
	var dotEnvNote string
	menv.environ, dotEnvNote = mcpEnviron(env.environ)
	// The warnings wait: a start that fails prints its reason first.
	var warnings strings.Builder
	menv.stderr = &warnings
	cfg, err := parseConfig(&menv, "mcp", args, config.NeedPlatform, func(fs *flag.FlagSet) {
		withConsole.bind(fs)
		fs.BoolVar(&noWait, "no-wait", false, "exit 3 when another session holds the channel, instead of serving the client and taking over when that session ends")
	})
	if errors.Is(err, flag.ErrHelp) {
		io.WriteString(env.stderr, warnings.String())
		return err
	}
	if err != nil {
		refuseInitialize(env.stdin, env.stdout, err)
		if warnings.Len() > 0 {
			return fmt.Errorf("%w\n%s", err, strings.TrimRight(warnings.String(), "\n"))
		}
		return err
	}
	io.WriteString(env.stderr, warnings.String())
	withConsole.apply(cfg)
	log := cfg.NewLogger(env.stderr)
	if dotEnvNote != "" {
		log.Info(dotEnvNote)
	}
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
		Reach:      reachHolder(cfg),
		Logger:     log,
	}, env.stdin, env.stdout)
}

// reachHolder connects a waiting session to the embedded server of the
// session holding the store (published in the store, reachRunning), so
// that the console lists it as waiting; nil on a shared NATS, where the
// waiting session has its own connection.
func reachHolder(cfg *config.Config) func(context.Context) (jetstream.JetStream, func(), error) {
	if !cfg.NATS.Embedded() {
		return nil
	}
	return func(context.Context) (jetstream.JetStream, func(), error) {
		url, ok, err := embedded.Running(cfg.NATS.StoreDir)
		if err == nil && !ok {
			err = errors.New("no server published in the store")
		}
		if err != nil {
			return nil, nil, err
		}
		// No reconnect: when the holder ends, so does its server, and
		// this session opens the store itself.
		nc, err := nats.Connect(url, nats.Name("molecule-relay mcp (waiting)"), nats.NoReconnect())
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return js, nc.Close, nil
	}
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
// A setting the environment gives wins over the .env file, under whichever
// name each gives it (dotEnvShadowed); note says in one line what the
// .env gave that was not taken. The two names of one setting set in the
// same place must agree (config.Load).
func mcpEnviron(environ []string) (_ []string, note string) {
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
		path := filepath.Join(stateDir, ".env")
		var skipped []string
		for _, kv := range readDotEnv(path) {
			if by := dotEnvShadowed(kv[0], set); by != "" {
				skipped = append(skipped, kv[0]+" (the environment's "+by+")")
				continue
			}
			add(kv[0], kv[1])
		}
		if len(skipped) > 0 {
			note = "the environment wins over " + path + ": not taken from it " + strings.Join(skipped, ", ")
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
	return slices.DeleteFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "MOLECULE_STATE_DIR=") }), note
}

// workspaceVars name the workspaces and their credentials: one setting,
// which the environment gives whole as soon as it names a workspace.
var (
	workspaceVars   = []string{"MOLECULE_WORKSPACE_ID", "MOLECULE_WORKSPACE_TOKEN", "MOLECULE_WORKSPACE_TOKEN_FILE", "MOLECULE_WORKSPACE_IDS", "MOLECULE_WORKSPACE_TOKENS", "MOLECULE_WORKSPACES_JSON", "MOLECULE_PLATFORM_URLS", "MOLECULE_ORG_IDS"}
	workspaceNaming = []string{"MOLECULE_WORKSPACE_ID", "MOLECULE_WORKSPACE_IDS", "MOLECULE_WORKSPACES_JSON"}
)

// dotEnvShadowed is the variable of env that gives the setting the .env's
// name stands for, or "": a .env's MOLECULE_WORKSPACE_IDS is not added to
// an exported MOLECULE_WORKSPACE_ID (the workspace would be configured
// twice, issue 41), nor its MOLECULE_POLL_INTERVAL_MS to an exported
// MOLECULE_POLL_INTERVAL (the two would disagree).
func dotEnvShadowed(name string, env map[string]string) string {
	if slices.Contains(workspaceVars, name) {
		for _, k := range workspaceNaming {
			if _, ok := env[k]; ok {
				return k
			}
		}
		return ""
	}
	for _, s := range config.ChannelSettings {
		if s.Name != name && s.Ours != name || strings.Contains(s.Ours, ",") {
			continue
		}
		for _, k := range []string{s.Name, s.Ours} {
			if _, ok := env[k]; ok && k != name {
				return k
			}
		}
	}
	return ""
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

// refuseInitialize answers the client's initialize request, if one comes
// within a second, with a JSON-RPC error carrying why the start failed:
// Claude Code's `claude mcp list` shows that message ("✘ Failed to
// connect — -32603: …"), where an exit alone shows "Connection closed"
// and leaves the reason in its log file (issue 41). A terminal on stdin
// is not read.
func refuseInitialize(stdin io.Reader, stdout io.Writer, cause error) {
	if f, ok := stdin.(*os.File); ok {
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice != 0 {
			return
		}
	}
	msg, _, _ := strings.Cut(cause.Error(), "\n")
	id := make(chan json.RawMessage, 1)
	go func() {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(sc.Bytes(), &req) == nil && req.Method == "initialize" && len(req.ID) > 0 {
				id <- req.ID
				return
			}
		}
		id <- nil // input ended without one
	}()
	select {
	case rid := <-id:
		if rid == nil {
			return
		}
		resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rid,
			"error": map[string]any{"code": -32603, "message": "molecule-relay mcp: " + msg}})
		_, _ = stdout.Write(append(resp, '\n'))
	case <-time.After(time.Second):
	}
}
