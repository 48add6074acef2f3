package config

import (
	"regexp"
	"strings"
)

// relaySecrets are variables of the relay's environment an exec: handler
// never gets, whatever MOLECULE_HANDLER_ENV says: naming one is refused,
// a prefix that matches one leaves it out. A pattern ending in * is a
// prefix.
var relaySecrets = []struct{ pattern, what string }{
	{"MOLECULE_WORKSPACE_TOKEN*", "a workspace token (or its file, or its Lambda secret): a handler reaches the platform through the agent API with its per-message MOLECULE_AGENT_TOKEN instead"},
	{"MOLECULE_WORKSPACES_JSON", "the workspaces' tokens (the TypeScript channel's list)"},
	{"MOLECULE_WORKSPACES_FILE", "the workspaces' tokens (their file)"},
	{"MOLECULE_AGENT_TOKEN", "set by the relay for each message (the capability token of the agent API)"},
	{"MOLECULE_AGENT_API", "set by the relay for each message (the agent API's URL)"},
	{"NATS_CREDS", "the relay's NATS credentials"},
	{"NATS_NKEY", "the relay's NATS credentials"},
	{"NATS_USER", "the relay's NATS credentials"},
	{"NATS_PASSWORD", "the relay's NATS credentials"},
	{"NATS_TOKEN", "the relay's NATS credentials"},
	{"NATS_TLS_KEY", "the relay's NATS credentials"},
	// In Lambda these are the function role's, which may read the tokens'
	// secret; elsewhere AWS_PROFILE (and ~/.aws, under HOME) serve.
	{"AWS_ACCESS_KEY_ID", "the relay's AWS credentials (pass AWS_PROFILE instead)"},
	{"AWS_SECRET_ACCESS_KEY", "the relay's AWS credentials (pass AWS_PROFILE instead)"},
	{"AWS_SESSION_TOKEN", "the relay's AWS credentials (pass AWS_PROFILE instead)"},
}

// handlerEnvEntry is a variable name, or a prefix of one followed by *.
var handlerEnvEntry = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$`)

// matches says whether the variable name is matched by pattern (a name,
// or a prefix ending in *).
func matches(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}

// relaySecret says why name is one of relaySecrets, or "".
func relaySecret(name string) string {
	for _, s := range relaySecrets {
		if matches(s.pattern, name) {
			return s.what
		}
	}
	return ""
}

// handlerEnvPatterns are MOLECULE_HANDLER_ENV's entries, trimmed, empty
// ones dropped.
func handlerEnvPatterns(entries []string) []string {
	var out []string
	for _, e := range entries {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// validateHandlerEnv refuses an entry that is not a name or a prefix, a
// bare *, and an entry every match of which is one of the relay's secrets.
func (c *Config) validateHandlerEnv() error {
	const name = "MOLECULE_HANDLER_ENV"
	for _, e := range handlerEnvPatterns(c.HandlerEnv) {
		if e == "*" {
			return bad(name, "* would pass the whole environment; name the variables (ANTHROPIC_API_KEY) or prefixes (OPENAI_*) the handler needs")
		}
		if !handlerEnvEntry.MatchString(e) {
			return bad(name, "entry %q is neither a variable name nor a prefix ending in * (letters, digits and _, e.g. ANTHROPIC_API_KEY,OPENAI_*)", e)
		}
		// A prefix inside a secret's prefix (MOLECULE_WORKSPACE_TOKEN_*)
		// matches nothing but secrets: refused like a secret's name.
		if why := relaySecret(strings.TrimSuffix(e, "*")); why != "" {
			return bad(name, "%s is %s; a handler never gets it", e, why)
		}
	}
	return nil
}

// handlerEnviron is the KEY=value entries of environ that patterns pass to
// an exec: handler, in environ's order, without the relay's secrets.
func handlerEnviron(patterns []string, environ []string) []string {
	patterns = handlerEnvPatterns(patterns)
	if len(patterns) == 0 {
		return nil
	}
	var out []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || relaySecret(k) != "" {
			continue
		}
		for _, p := range patterns {
			if p != "*" && matches(p, k) {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}
