package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// mcpServer is one entry of Claude Code's mcpServers: a stdio server.
type mcpServer struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env,omitempty"`
}

// mcpCarried are the variables of the environment install writes into
// the server's configuration besides the workspace's, when set.
// NATS_STORE_DIR is not: mcp's own default, one store per user in the
// state directory, is the one every session shares.
// Paths are made absolute: Claude Code starts the server in the project.
var mcpCarried = []string{"MOLECULE_ORG_ID", "MOLECULE_AGENT_NAME", "MOLECULE_AGENT_DESC", "NATS_URL", "NATS_CREDS", "MOLECULE_STATE_DIR"}

// runMCPInstall writes Claude Code's configuration of molecule-relay mcp
// for the workspace the environment configures (as connect reads it): by
// `claude mcp add-json` (scopes user and local) or into the project's
// .mcp.json (scope project). The token is never written into either: it
// goes to a file of mode 0600 that MOLECULE_WORKSPACE_TOKEN_FILE names
// (the one already configured, or one in the state directory). The
// command is this binary's absolute path, so Claude Code finds it
// whatever its PATH.
func runMCPInstall(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("molecule-relay mcp install", flag.ContinueOnError)
	scope := fs.String("scope", "user", "user (every project of yours), local (this project, private) or project (this project's .mcp.json, shared)")
	name := fs.String("name", "molecule", "the server's name in Claude Code")
	claude := fs.String("claude", "claude", "Claude Code's CLI, for scopes user and local")
	printOnly := fs.Bool("print", false, "print the server's JSON and write nothing")
	if err := parseFlags(env, "mcp install", fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if !slices.Contains([]string{"user", "local", "project"}, *scope) {
		return usageError{fmt.Errorf("--scope %q: use user, local or project", *scope)}
	}
	srv, note, err := mcpServerFor(env, *printOnly)
	if err != nil {
		return err
	}
	js, _ := json.Marshal(srv)
	if *printOnly {
		fmt.Fprintln(env.stdout, string(js))
		return nil
	}
	if *scope == "project" {
		err = addToMCPJSON(".mcp.json", *name, srv)
	} else {
		err = claudeAddJSON(ctx, env, *claude, *scope, *name, js)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "installed %q (scope %s): %s mcp\n%s", *name, *scope, srv.Command, note)
	fmt.Fprintf(env.stdout, "check it: claude mcp list (molecule-relay doctor checks the workspace)\nstart Claude Code with: claude --dangerously-load-development-channels server:%s\n", *name)
	return nil
}

// mcpServerFor is the server entry for the configuration mcp would read,
// and a line saying where its workspace and token come from. It writes
// the token file unless dryRun.
func mcpServerFor(env *cliEnv, dryRun bool) (mcpServer, string, error) {
	environ, _ := mcpEnviron(env.environ)
	cfg, err := config.Load(nil, environ)
	if err == nil {
		err = cfg.Validate(config.NeedPlatform)
	}
	if err != nil {
		return mcpServer{}, "", usageError{fmt.Errorf("%w; mcp install configures the workspace set as for connect: MOLECULE_PLATFORM_URL, MOLECULE_WORKSPACE_ID and MOLECULE_WORKSPACE_TOKEN (or _TOKEN_FILE)", err)}
	}
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		return mcpServer{}, "", fmt.Errorf("this binary's path: %w", err)
	}
	srv := mcpServer{Type: "stdio", Command: bin, Args: []string{"mcp"}, Env: map[string]string{}}
	own := envMap(env.environ)
	switch {
	case own["MOLECULE_WORKSPACE_ID"] != "" && len(cfg.WorkspaceIDs) == 0:
	case own["MOLECULE_WORKSPACE_IDS"] != "" || own["MOLECULE_WORKSPACES_JSON"] != "":
		return mcpServer{}, "", usageError{errors.New("mcp install writes one workspace (MOLECULE_WORKSPACE_ID); for several, put them in the state directory's .env (mode 0600; docs/claude-channel.md), which mcp reads, and run mcp install without them")}
	default: // the workspaces come from the state directory's .env
		return srv, "the workspaces and tokens come from the state directory's .env, which mcp reads at each start\n", nil
	}
	tokenFile, err := mcpTokenFile(own, cfg, dryRun)
	if err != nil {
		return mcpServer{}, "", err
	}
	srv.Env["MOLECULE_PLATFORM_URL"] = cfg.PlatformURL
	srv.Env["MOLECULE_WORKSPACE_ID"] = cfg.WorkspaceID
	srv.Env["MOLECULE_WORKSPACE_TOKEN_FILE"] = tokenFile
	for _, k := range mcpCarried {
		if v := own[k]; v != "" {
			if k == "NATS_CREDS" || k == "MOLECULE_STATE_DIR" {
				v, _ = filepath.Abs(v)
			}
			srv.Env[k] = v
		}
	}
	return srv, fmt.Sprintf("workspace %s; its token is read from %s (mode 0600), never written into Claude Code's configuration\n", cfg.WorkspaceID, tokenFile), nil
}

// mcpTokenFile is the absolute path of a mode-0600 file holding the
// workspace's token: MOLECULE_WORKSPACE_TOKEN_FILE when set (Validate
// checked its mode), else <state dir>/<workspace>.token, written now.
func mcpTokenFile(own map[string]string, cfg *config.Config, dryRun bool) (string, error) {
	if f := own["MOLECULE_WORKSPACE_TOKEN_FILE"]; f != "" && own["MOLECULE_WORKSPACE_TOKEN"] == "" {
		return filepath.Abs(f)
	}
	dir := own["MOLECULE_STATE_DIR"]
	if dir == "" {
		home, err := os.UserHomeDir()
		if h := own["HOME"]; h != "" {
			home, err = h, nil
		}
		if err != nil {
			return "", fmt.Errorf("the state directory: %w; set MOLECULE_STATE_DIR", err)
		}
		dir = filepath.Join(home, ".claude", "channels", "molecule")
	}
	path, err := filepath.Abs(filepath.Join(dir, cfg.WorkspaceID+".token"))
	if err != nil || dryRun {
		return path, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg.WorkspaceToken+"\n"), 0o600); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// claudeAddJSON replaces the server name in Claude Code's scope with
// `claude mcp remove` and `claude mcp add-json`.
func claudeAddJSON(ctx context.Context, env *cliEnv, claude, scope, name string, js []byte) error {
	bin, err := exec.LookPath(claude)
	if err != nil {
		return fmt.Errorf("the Claude Code CLI %q is not on PATH (%w): install it, pass --claude PATH, or use --scope project (writes ./.mcp.json), or --print and add the JSON yourself", claude, err)
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env.environ
		return cmd.CombinedOutput()
	}
	_, _ = run("mcp", "remove", name, "-s", scope) // absent is fine
	if out, err := run("mcp", "add-json", name, string(js), "-s", scope); err != nil {
		return fmt.Errorf("claude mcp add-json: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// addToMCPJSON sets mcpServers[name] in a project's .mcp.json, keeping
// whatever else it holds.
func addToMCPJSON(path, name string, srv mcpServer) error {
	doc := map[string]any{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("%s is not JSON (%w); fix or move it", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	servers, _ := doc["mcpServers"].(map[string]any)
	if servers == nil {
		servers = map[string]any{}
	}
	servers[name] = srv
	doc["mcpServers"] = servers
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// envMap is environ as a map; the last of a repeated name wins.
func envMap(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
