package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/registry"
)

var workspacesSubcommands = [][2]string{
	{"add <workspace> --token-file F", "add a workspace (or replace its token); --platform-url, --org-id (MOLECULE_PLATFORM_URL, MOLECULE_ORG_ID)"},
	{"import FILE", "add every workspace of a JSON file (MOLECULE_WORKSPACES_JSON's shape, mode 0600)"},
	{"remove <workspace>", "stop polling it and forget it (in-flight messages are still answered)"},
	{"pause <workspace>", "stop polling it, keep its entry"},
	{"resume <workspace>", "poll it again"},
	{"list", "the workspaces, paused or not, and when added (--json); never the tokens"},
	{"rotate-key --new-key-file F", "seal every token with a new key (the current key from MOLECULE_REGISTRY_KEY_FILE)"},
}

// runWorkspaces is `workspaces add|import|remove|pause|resume|list|rotate-key`:
// change the workspace registry (internal/registry) every relay with
// MOLECULE_WORKSPACE_REGISTRY=true follows.
func runWorkspaces(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 || isHelpArg(args[0]) {
		printSubcommandHelp(env.stdout, "workspaces", "add | import | remove | pause | resume | list | rotate-key", workspacesSubcommands, "workspaces list")
		if len(args) == 0 {
			return usageError{errors.New("usage: workspaces add|import|remove|pause|resume|list|rotate-key")}
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	var arg string
	switch sub {
	case "add", "import", "remove", "pause", "resume":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			what := "<workspace>"
			if sub == "import" {
				what = "FILE"
			}
			if len(rest) == 1 && isHelpArg(rest[0]) {
				break // the flag parser prints the help
			}
			return usageError{fmt.Errorf("usage: workspaces %s %s [flags]", sub, what)}
		}
		arg, rest = rest[0], rest[1:]
	case "list", "rotate-key":
	default:
		return usageError{fmt.Errorf("unknown workspaces subcommand %q; use add, import, remove, pause, resume, list or rotate-key", sub)}
	}
	var tokenFile, newKeyFile string
	var asJSON bool
	cfg, err := parseConfig(env, "workspaces "+sub, rest, 0, func(fs *flag.FlagSet) {
		fs.StringVar(&tokenFile, "token-file", "", "add: file (mode 0600) holding the workspace's token")
		fs.StringVar(&newKeyFile, "new-key-file", "", "rotate-key: file (mode 0600) holding the new key, 32 bytes in base64")
		fs.BoolVar(&asJSON, "json", false, "list: print JSON")
	})
	if err != nil {
		return err
	}
	key, err := registry.KeyFromConfig(context.Background(), cfg)
	if errors.Is(err, registry.ErrKeyUnavailable) {
		return err
	}
	if err != nil {
		return usageError{err}
	}
	var entry registry.Entry
	var imported []registry.Entry
	var next *registry.Key
	switch sub { // every input is read before NATS is contacted
	case "add":
		if tokenFile == "" {
			return usageError{errors.New("workspaces add: --token-file is required (a file of mode 0600 holding the token; a token on the command line would stay in the shell history)")}
		}
		tok, err := config.ReadTokenFile(tokenFile)
		if err != nil {
			return usageError{fmt.Errorf("--token-file: %w", err)}
		}
		entry = registry.Entry{ID: arg, Token: tok, PlatformURL: cfg.PlatformURL, OrgID: cfg.OrgID}
	case "import":
		if imported, err = registry.ReadFile(arg, cfg.PlatformURL); err != nil {
			return usageError{err}
		}
	case "rotate-key":
		if newKeyFile == "" {
			return usageError{errors.New("workspaces rotate-key: --new-key-file is required; make one with: head -c 32 /dev/urandom | base64 > new.key && chmod 600 new.key")}
		}
		if next, err = registry.LoadKey(newKeyFile, ""); err != nil {
			return usageError{fmt.Errorf("--new-key-file: %w", err)}
		}
	}
	log := cfg.NewLogger(env.stderr)
	if err := reachRunning(cfg, log); err != nil {
		return err
	}
	conn, err := broker.Connect(ctx, cfg.NATS, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg, err := registry.Open(ctx, conn.JS, key, true, cfg.Replicas)
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		if err := reg.Put(ctx, entry); err != nil {
			return asUsage(err)
		}
		fmt.Fprintf(env.stdout, "added %s\n", arg)
	case "import":
		for _, e := range imported {
			if err := reg.Put(ctx, e); err != nil {
				return err
			}
		}
		fmt.Fprintf(env.stdout, "imported %d workspace(s) from %s\n", len(imported), arg)
	case "remove":
		if err := reg.Remove(ctx, arg); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "removed %s\n", arg)
	case "pause", "resume":
		if err := reg.SetPaused(ctx, arg, sub == "pause"); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "%sd %s\n", strings.TrimSuffix(sub, "e"), arg)
	case "list":
		return listWorkspaces(ctx, env, reg, asJSON)
	case "rotate-key":
		n, err := reg.Rotate(ctx, next)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "re-sealed %d token(s) with the new key; now set MOLECULE_REGISTRY_KEY_FILE to %s and restart the relays\n", n, newKeyFile)
	}
	return nil
}

func asUsage(err error) error {
	if errors.Is(err, registry.ErrInvalid) {
		return usageError{err}
	}
	return err
}

func listWorkspaces(ctx context.Context, env *cliEnv, reg *registry.Registry, asJSON bool) error {
	all, err := reg.List(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		if all == nil {
			all = []registry.Entry{}
		}
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(all) // Entry's Token is json:"-"
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKSPACE\tSTATE\tPLATFORM\tADDED")
	for _, e := range all {
		state := "active"
		if e.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.ID, state, e.PlatformURL, e.Added.Format(time.RFC3339))
	}
	return tw.Flush()
}
