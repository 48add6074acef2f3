package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// quietFlags makes fs print nothing by itself: a command's help and its
// flag errors are ours (help on stdout; an error in one line with a
// pointer to -h, not the whole list).
func quietFlags(fs *flag.FlagSet) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
}

// parseFlags parses args into fs for command name: -h and --help print the
// command's help on stdout and return flag.ErrHelp (exit 0); a bad flag is
// a usageError. With env.flagSink set (completion), it hands fs over and
// parses nothing.
func parseFlags(env *cliEnv, name string, fs *flag.FlagSet, args []string) error {
	quietFlags(fs)
	if env.flagSink != nil {
		env.flagSink(fs)
		return flag.ErrHelp
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(env.stdout, name, fs)
			return err
		}
		return usageError{fmt.Errorf("%v; run molecule-relay %s -h for its flags", err, name)}
	}
	return nil
}

// isHelpArg says whether a is a request for help.
func isHelpArg(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// summaryOf is the one-line summary of command name ("dlq list" → dlq's).
func summaryOf(name string) string {
	first, _, _ := strings.Cut(name, " ")
	for _, c := range commands {
		if c.name == first {
			return c.summary
		}
	}
	return ""
}

// printCommandHelp prints the help of command name: its own flags, then
// the settings it reads, grouped, each as its flag and its variable.
func printCommandHelp(w io.Writer, name string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: molecule-relay %s [flags]\n\n%s\n", name, summaryOf(name))
	config := map[string]*flag.Flag{} // env name → flag
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if env, _ := parseBindUsage(f.Usage); env != "" {
			config[env] = f
		} else {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		for _, f := range own {
			fmt.Fprintf(w, "  %-24s %s%s\n", "--"+f.Name+valueHint(f), f.Usage, defaultNote(f))
		}
	}
	if len(config) == 0 {
		return
	}
	shown := map[string]bool{}
	for _, g := range commandGroups(name) {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, s := range g.vars {
			f := config[s.env]
			if f == nil {
				continue
			}
			shown[s.env] = true
			_, def := parseBindUsage(f.Usage)
			fmt.Fprintf(w, "  %-24s %-30s %s%s\n", "--"+f.Name, s.env, s.help, bracketDefault(def))
		}
	}
	// Whatever a command reads that no group lists yet (a new variable)
	// is shown rather than hidden, for the commands that list everything.
	if len(commandGroups(name)) == len(commandGroups("connect")) {
		var rest []string
		for env := range config {
			if !shown[env] && !inAnyGroup(env) {
				rest = append(rest, env)
			}
		}
		sort.Strings(rest)
		if len(rest) > 0 {
			fmt.Fprintf(w, "\nOther settings:\n")
			for _, env := range rest {
				_, def := parseBindUsage(config[env].Usage)
				fmt.Fprintf(w, "  %-24s %-30s%s\n", "--"+config[env].Name, env, bracketDefault(def))
			}
		}
	}
	fmt.Fprintf(w, "\nEach setting is an environment variable; its flag, when given, overrides it.\n")
	if name == "connect" || name == "mcp" {
		printChannelSettings(w)
	}
	if !strings.Contains(name, " ") && name != "connect" && name != "mcp" {
		fmt.Fprintf(w, "The command also accepts the other settings of `molecule-relay connect -h`, which it does not use.\n")
	}
}

// inAnyGroup says whether env belongs to any group.
func inAnyGroup(env string) bool {
	for _, g := range commandGroups("connect") {
		for _, s := range g.vars {
			if s.env == env {
				return true
			}
		}
	}
	return false
}

func bracketDefault(def string) string {
	if def == "" {
		return ""
	}
	return " [" + def + "]"
}

// valueHint is " VALUE" for a flag that takes one.
func valueHint(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	return " VALUE"
}

func defaultNote(f *flag.Flag) string {
	if f.DefValue == "" || f.DefValue == "false" || f.DefValue == "0" {
		return ""
	}
	return " [" + f.DefValue + "]"
}

// printSubcommandHelp prints the help of a command made of subcommands
// (dlq, history).
func printSubcommandHelp(w io.Writer, name, use string, subs [][2]string, flagsOf string) {
	fmt.Fprintf(w, "usage: molecule-relay %s %s [flags]\n\n%s\n\n", name, use, summaryOf(name))
	for _, s := range subs {
		fmt.Fprintf(w, "  %-34s %s\n", s[0], s[1])
	}
	fmt.Fprintf(w, "\nRun molecule-relay %s -h for the flags and settings.\n", flagsOf)
}

var dlqSubcommands = [][2]string{
	{"list", "the dead letters, newest last (--stage, --workspace, --reason, --limit, --json; the messages themselves only with --show-body)"},
	{"show SEQ", "one dead letter as JSON, the message itself withheld (--show-body prints it)"},
	{"replay SEQ", "publish it again to the stage that failed"},
	{"purge", "delete the dead letters that match (--yes to really delete)"},
}

var historySubcommands = [][2]string{
	{"show <workspace>", "the workspace's conversations (--json)"},
	{"show <workspace> <conversation>", "one conversation's turns (--json)"},
	{"forget <workspace> [conversation]", "erase a conversation, or all of the workspace's"},
}

// warnUnknownVars prints a warning on stderr for each MOLECULE_* variable
// that nothing reads.
func warnUnknownVars(env *cliEnv) {
	for _, w := range unknownVarWarnings(env.environ) {
		fmt.Fprintln(env.stderr, "molecule-relay: warning:", w)
	}
}
