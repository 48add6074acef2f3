package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// completionCommand is what a shell completes for one command.
type completionCommand struct {
	name, summary string
	subs          []string // dlq, history
	flags         []completionFlag
}

type completionFlag struct{ name, usage string }

// completionCommands lists every command with its flags, taken from the
// flag set the command itself builds (env.flagSink), so the scripts
// cannot drift from the commands.
func completionCommands(ctx context.Context) []completionCommand {
	ctx, cancel := context.WithCancel(ctx)
	cancel() // nothing may run: each command stops at its flag set
	var out []completionCommand
	for _, c := range commands {
		cc := completionCommand{name: c.name, summary: c.summary}
		args := []string{"-h"}
		switch c.name {
		case "dlq":
			cc.subs, args = []string{"list", "show", "replay", "purge"}, []string{"list", "-h"}
		case "history":
			cc.subs, args = []string{"show", "forget"}, []string{"show", "-h"}
		case "completion":
			cc.subs = []string{"bash", "zsh", "fish"}
			out = append(out, cc)
			continue
		case "version":
			out = append(out, cc)
			continue
		}
		env := &cliEnv{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, flagSink: func(fs *flag.FlagSet) {
			fs.VisitAll(func(f *flag.Flag) {
				u := f.Usage
				if envName, _ := parseBindUsage(u); envName != "" {
					u = envName
				}
				cc.flags = append(cc.flags, completionFlag{f.Name, u})
			})
		}}
		_ = c.run(ctx, env, args)
		sort.Slice(cc.flags, func(i, j int) bool { return cc.flags[i].name < cc.flags[j].name })
		out = append(out, cc)
	}
	return out
}

// runCompletion prints the completion script of a shell.
func runCompletion(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 1 && isHelpArg(args[0]) || len(args) == 0 {
		fmt.Fprint(env.stdout, completionHelp)
		if len(args) == 0 {
			return usageError{fmt.Errorf("completion needs a shell: bash, zsh or fish")}
		}
		return flag.ErrHelp
	}
	if len(args) > 1 {
		return usageError{fmt.Errorf("unexpected argument %q; usage: completion bash | zsh | fish", args[1])}
	}
	cmds := completionCommands(ctx)
	switch args[0] {
	case "bash":
		writeBash(env.stdout, cmds)
	case "zsh":
		writeZsh(env.stdout, cmds)
	case "fish":
		writeFish(env.stdout, cmds)
	default:
		return usageError{fmt.Errorf("completion: %q is not a supported shell; use bash, zsh or fish", args[0])}
	}
	return nil
}

const completionHelp = `usage: molecule-relay completion bash | zsh | fish

Prints a completion script for the shell: commands, subcommands and each
command's flags.

  bash:  source <(molecule-relay completion bash)          # e.g. in ~/.bashrc
  zsh:   molecule-relay completion zsh > "${fpath[1]}/_molecule-relay"   # then restart zsh
         (or: source <(molecule-relay completion zsh), after compinit)
  fish:  molecule-relay completion fish > ~/.config/fish/completions/molecule-relay.fish
`

func flagWords(c completionCommand) string {
	var w []string
	for _, f := range c.flags {
		w = append(w, "--"+f.name)
	}
	return strings.Join(w, " ")
}

func writeBash(w io.Writer, cmds []completionCommand) {
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	fmt.Fprintf(w, "# bash completion for molecule-relay (molecule-relay completion bash)\n")
	fmt.Fprintf(w, "_molecule_relay() {\n")
	fmt.Fprintf(w, "  local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n")
	fmt.Fprintf(w, "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n")
	fmt.Fprintf(w, "    COMPREPLY=($(compgen -W %q -- \"$cur\"))\n    return\n  fi\n", strings.Join(names, " ")+" help --help --version")
	fmt.Fprintf(w, "  case \"${COMP_WORDS[1]}\" in\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "    %s)\n", c.name)
		if len(c.subs) > 0 {
			fmt.Fprintf(w, "      if [ \"$COMP_CWORD\" -eq 2 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(c.subs, " "))
		}
		fmt.Fprintf(w, "      COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", flagWords(c)+" --help")
	}
	fmt.Fprintf(w, "  esac\n}\ncomplete -o default -F _molecule_relay molecule-relay\n")
}

// zshQuote quotes s for a single-quoted zsh word.
func zshQuote(s string) string { return strings.ReplaceAll(s, "'", `'\''`) }

func writeZsh(w io.Writer, cmds []completionCommand) {
	fmt.Fprintf(w, "#compdef molecule-relay\n# zsh completion for molecule-relay (molecule-relay completion zsh)\n")
	fmt.Fprintf(w, "_molecule-relay() {\n  local -a cmds\n  cmds=(\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "    '%s:%s'\n", c.name, zshQuote(strings.ReplaceAll(c.summary, ":", `\:`)))
	}
	fmt.Fprintf(w, "  )\n  if (( CURRENT == 2 )); then\n    _describe 'command' cmds\n    return\n  fi\n")
	fmt.Fprintf(w, "  case $words[2] in\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "    %s)\n", c.name)
		if len(c.subs) > 0 {
			fmt.Fprintf(w, "      if (( CURRENT == 3 )); then compadd -- %s; return; fi\n", strings.Join(c.subs, " "))
		}
		fmt.Fprintf(w, "      local -a flags\n      flags=(\n")
		for _, f := range c.flags {
			fmt.Fprintf(w, "        '--%s[%s]'\n", f.name, zshQuote(strings.NewReplacer("[", `\[`, "]", `\]`, ":", `\:`).Replace(f.usage)))
		}
		fmt.Fprintf(w, "      )\n      _arguments -s $flags '*: :_files'\n      ;;\n")
	}
	// From fpath the file is the completion function's body; sourced, it
	// registers the function.
	fmt.Fprintf(w, "  esac\n}\nif [ \"$funcstack[1]\" = \"_molecule-relay\" ]; then\n  _molecule-relay \"$@\"\nelse\n  compdef _molecule-relay molecule-relay\nfi\n")
}

// fishQuote quotes s for a single-quoted fish word.
func fishQuote(s string) string {
	return strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s)
}

func writeFish(w io.Writer, cmds []completionCommand) {
	fmt.Fprintf(w, "# fish completion for molecule-relay (molecule-relay completion fish)\n")
	fmt.Fprintf(w, "complete -c molecule-relay -f\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "complete -c molecule-relay -n '__fish_use_subcommand' -a %s -d '%s'\n", c.name, fishQuote(c.summary))
	}
	for _, c := range cmds {
		cond := "__fish_seen_subcommand_from " + c.name
		if len(c.subs) > 0 {
			fmt.Fprintf(w, "complete -c molecule-relay -n '%s; and not __fish_seen_subcommand_from %s' -a '%s'\n", cond, strings.Join(c.subs, " "), strings.Join(c.subs, " "))
		}
		for _, f := range c.flags {
			fmt.Fprintf(w, "complete -c molecule-relay -n '%s' -l %s -d '%s'\n", cond, f.name, fishQuote(f.usage))
		}
	}
}
