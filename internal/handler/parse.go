package handler

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
)

// ErrInvalidSpec is matched by Parse's errors.
var ErrInvalidSpec = errors.New("handler: invalid handler spec")

// SpecForms lists the valid handler specs, for help texts and errors.
const SpecForms = `echo | exec:<program> [args...] | http:<http(s) URL> | openai:<base URL of an OpenAI-compatible server>`

// Parse builds the built-in handler a spec names:
//
//   - "echo" replies "echo: <text>".
//   - "exec:<program> [args...]" runs the program with the Payload JSON
//     on stdin; its trimmed stdout is the reply. The arguments are split
//     like a shell would split them, without a shell: whitespace
//     separates, '...' and "..." quote, a backslash escapes the next
//     character (inside "..." only \" and \\); nothing is expanded. A
//     program without a '/' is looked up in PATH now. See NewExec.
//   - "http:<URL>" POSTs the Payload JSON to the URL. See NewHTTP.
//   - "openai:<base URL>" calls <base>/v1/chat/completions of an
//     OpenAI-compatible server. See NewOpenAI.
//
// Parse applies opts' defaults and validates them.
func Parse(spec string, opts Options) (Handler, error) {
	opts.SetDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	spec = strings.TrimSpace(spec)
	kind, rest, _ := strings.Cut(spec, ":")
	rest = strings.TrimSpace(rest)
	switch {
	case spec == "echo":
		return Echo, nil
	case kind == "exec":
		argv, err := SplitArgs(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: exec: %w", ErrInvalidSpec, err)
		}
		if len(argv) == 0 {
			return nil, fmt.Errorf("%w: exec: no program; use exec:<program> [args...]", ErrInvalidSpec)
		}
		return NewExec(argv[0], argv[1:], opts)
	case kind == "http":
		return NewHTTP(rest, opts)
	case kind == "openai":
		return NewOpenAI(rest, opts)
	case spec == "mcp":
		// Claude answers through the MCP session (internal/mcpchannel).
		return nil, fmt.Errorf("%w: the mcp handler runs only under molecule-relay mcp", ErrInvalidSpec)
	}
	return nil, fmt.Errorf("%w: %q; use one of: %s", ErrInvalidSpec, redactSpec(spec), SpecForms)
}

// redactSpec hides anything that looks like URL credentials in a spec
// echoed in an error.
func redactSpec(spec string) string {
	if i := strings.Index(spec, "@"); i >= 0 {
		if j := strings.Index(spec, "://"); j >= 0 && j < i {
			return spec[:j+3] + "redacted" + spec[i:]
		}
	}
	return spec
}

// SplitArgs splits s into words like a POSIX shell, without expanding
// anything: unquoted whitespace separates words; '...' quotes literally;
// "..." quotes with \" and \\ as the only escapes; outside quotes a
// backslash escapes the next character. An unterminated quote or a
// trailing backslash is an error.
func SplitArgs(s string) ([]string, error) {
	var (
		args    []string
		cur     strings.Builder
		inWord  bool
		quote   rune // 0, '\'' or '"'
		escaped bool
	)
	for _, r := range s {
		switch {
		case escaped:
			if quote == '"' && r != '"' && r != '\\' {
				cur.WriteRune('\\')
			}
			cur.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escaped = true
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\':
			escaped, inWord = true, true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	switch {
	case quote != 0:
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	case escaped:
		return nil, fmt.Errorf("trailing backslash in %q", s)
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args, nil
}

// resolveProgram finds program now, so a typo fails at start-up rather
// than on the first message: a name without '/' is looked up in PATH, a
// path must be an executable file.
func resolveProgram(program string) (string, error) {
	if !strings.ContainsRune(program, os.PathSeparator) && !strings.ContainsRune(program, '/') {
		p, err := exec.LookPath(program)
		if err != nil {
			return "", fmt.Errorf("%w: exec: program %q not found in PATH: %w", ErrInvalidSpec, program, err)
		}
		return p, nil
	}
	fi, err := os.Stat(program)
	if err != nil {
		return "", fmt.Errorf("%w: exec: program %q: %w", ErrInvalidSpec, program, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: exec: program %q is not an executable file", ErrInvalidSpec, program)
	}
	return program, nil
}

// parseHTTPURL checks an http(s) URL of a spec.
func parseHTTPURL(kind, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %s: %q is not an http(s) URL; use %s:https://host/path", ErrInvalidSpec, kind, redactSpec(raw), kind)
	}
	return u, nil
}

// displayURL is u without credentials and query, for logs and errors.
func displayURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}
