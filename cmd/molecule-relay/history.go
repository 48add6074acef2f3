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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// runHistory is `history show|forget <workspace> [conversation]`: inspect
// or erase the conversation memory (internal/memory) kept in NATS.
func runHistory(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 && isHelpArg(args[0]) {
		printSubcommandHelp(env.stdout, "history", "show | forget <workspace> [conversation]", historySubcommands, "history show")
		return flag.ErrHelp
	}
	sub, ws, conv, rest, err := historyArgs(args)
	if err != nil {
		return err
	}
	var asJSON bool
	rt, _, err := openForInspection(ctx, env, "history "+sub, rest, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "show: print JSON")
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	js, topo := rt.Conn.JS, rt.Topo
	if topo.Memory == nil && topo.History == nil {
		return fmt.Errorf("no %s stream on this NATS server: conversation memory was never set up here", events.StreamMemory)
	}
	switch {
	case sub == "forget":
		done, err := memory.Forget(ctx, js, topo, ws, conv)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "forgot %d conversation(s) of %s%s\n", len(done), ws, listed(done))
		return nil
	case conv == "":
		return historyList(ctx, env, js, topo, ws, asJSON)
	default:
		return historyShow(ctx, env, js, topo, ws, conv, asJSON)
	}
}

// historyArgs checks the subcommand and its positional arguments before
// anything is opened, and returns the arguments left for the flags.
func historyArgs(args []string) (sub, ws, conv string, rest []string, err error) {
	const use = "history show|forget <workspace> [conversation] [flags]"
	if len(args) == 2 && isHelpArg(args[1]) && (args[0] == "show" || args[0] == "forget") {
		return args[0], "", "", args[1:], nil // the flag parser prints the help
	}
	if len(args) < 2 || strings.HasPrefix(args[1], "-") {
		return "", "", "", nil, usageError{errors.New("usage: " + use)}
	}
	sub, ws, rest = args[0], args[1], args[2:]
	if sub != "show" && sub != "forget" {
		return "", "", "", nil, usageError{fmt.Errorf("unknown history subcommand %q; usage: %s", sub, use)}
	}
	if err := events.ValidateWorkspaceID(ws); err != nil {
		return "", "", "", nil, usageError{err}
	}
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		conv, rest = rest[0], rest[1:]
	}
	return sub, ws, conv, rest, nil
}

// conversationSummary is one line of `history show <workspace>`.
type conversationSummary struct {
	Conversation string    `json:"conversation"`
	Turns        int       `json:"turns"`
	Last         time.Time `json:"last,omitzero"`
}

func historyList(ctx context.Context, env *cliEnv, js jetstream.JetStream, topo *events.Topology, ws string, asJSON bool) error {
	convs, err := memory.Conversations(ctx, js, topo, ws)
	if err != nil {
		return err
	}
	out := make([]conversationSummary, 0, len(convs))
	for _, c := range convs {
		turns, _, err := memory.Read(ctx, js, topo, ws, c)
		if err != nil {
			return err
		}
		s := conversationSummary{Conversation: c, Turns: len(turns)}
		if len(turns) > 0 {
			s.Last = turns[len(turns)-1].At
		}
		out = append(out, s)
	}
	if asJSON {
		return printJSON(env, out)
	}
	if len(out) == 0 {
		fmt.Fprintf(env.stdout, "no conversations of %s in memory\n", ws)
		return nil
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONVERSATION\tTURNS\tLAST")
	for _, s := range out {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Conversation, s.Turns, stamp(s.Last))
	}
	return tw.Flush()
}

func historyShow(ctx context.Context, env *cliEnv, js jetstream.JetStream, topo *events.Topology, ws, conv string, asJSON bool) error {
	turns, ok, err := memory.Read(ctx, js, topo, ws, conv)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no conversation %q of %s in memory (history show %s lists them)", conv, ws, ws)
	}
	if asJSON {
		return printJSON(env, turns)
	}
	for _, t := range turns {
		fmt.Fprintf(env.stdout, "%s %-5s %s\n", stamp(t.At), t.Role, t.Text)
		for _, a := range t.Attachments {
			fmt.Fprintf(env.stdout, "%25s attachment %s %s\n", "", a.Name, a.URI)
		}
	}
	return nil
}

func printJSON(env *cliEnv, v any) error {
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func listed(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return ": " + strings.Join(names, ", ")
}
