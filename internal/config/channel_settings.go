package config

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The TypeScript Claude Code channel's settings (EnterOS-AI/
// enteros-mcp-claude-channel 4255a28, server.ts:72-140, and its
// targets.ts), read as it defines them, so a user of that channel keeps
// their setup. Each is translated into the relay's own setting before the
// configuration is parsed. When both names are set they must agree: a
// disagreement is refused (exit 2) rather than one silently winning.

// ChannelSetting is one of the TypeScript channel's variables and the
// relay's setting it stands for.
type ChannelSetting struct {
	Name, Ours, Meaning string
	// to turns its value into the relay's form.
	to func(string) (string, error)
}

// ChannelSettings are the TypeScript channel's variables the relay reads.
// MOLECULE_PLATFORM_URL(S), MOLECULE_WORKSPACE_IDS/TOKENS and
// MOLECULE_AGENT_NAME/_DESC are already the relay's own names;
// MOLECULE_STATE_DIR is read by the mcp command.
var ChannelSettings = []ChannelSetting{
	{"MOLECULE_WORKSPACES_JSON", "MOLECULE_WORKSPACE_IDS, _TOKENS, MOLECULE_PLATFORM_URLS",
		`[{"id","token","platform_url"}] (also workspace_id, workspace_token, platformUrl): the workspaces, each on its platform`, nil},
	{"MOLECULE_POLL_INTERVAL_MS", "MOLECULE_POLL_INTERVAL", "milliseconds between polls", millis},
	{"MOLECULE_POLL_WINDOW_SECS", "MOLECULE_BACKLOG_WINDOW", "seconds of backlog a cold start delivers", seconds},
	{"MOLECULE_HEARTBEAT_INTERVAL_MS", "MOLECULE_HEARTBEAT_INTERVAL", "milliseconds between heartbeats; 0 (or negative) sends none", heartbeatMillis},
	{"MOLECULE_AUTO_REGISTER_POLL", "MOLECULE_REGISTER", "register in poll mode at start; 0, false or no turn it off", autoRegister},
}

func millis(v string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return "", fmt.Errorf("%q is not a whole number of milliseconds", v)
	}
	return strconv.Itoa(n) + "ms", nil
}

func seconds(v string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return "", fmt.Errorf("%q is not a whole number of seconds", v)
	}
	return strconv.Itoa(n) + "s", nil
}

// heartbeatMillis: the channel clamps a negative value to 0, which is off.
func heartbeatMillis(v string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("%q is not a whole number of milliseconds (0 turns heartbeats off)", v)
	}
	return strconv.Itoa(max(n, 0)) + "ms", nil
}

// autoRegister: anything but 0, false or no (any case) is on, as in the
// channel.
func autoRegister(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "no":
		return "false", nil
	}
	return "true", nil
}

// applyChannelSettings rewrites m (the environment and the flags given)
// so that each TypeScript channel variable set in it stands for the
// relay's setting, and refuses the two names disagreeing.
func applyChannelSettings(m map[string]string) error {
	for _, s := range ChannelSettings {
		raw, ok := m[s.Name]
		if !ok || s.to == nil {
			continue
		}
		v, err := s.to(raw)
		if err != nil {
			return invalid(s.Name, "%v", err)
		}
		if ours, set := m[s.Ours]; set && !sameValue(ours, v) {
			return invalid(s.Name, "%q (the TypeScript channel's name) and %s=%q disagree; set only one of them", raw, s.Ours, ours)
		}
		m[s.Ours] = v
	}
	return applyWorkspacesJSON(m)
}

// sameValue compares two values of one setting: as durations, as
// booleans, or as text.
func sameValue(a, b string) bool {
	var da, db Seconds
	if da.UnmarshalText([]byte(a)) == nil && db.UnmarshalText([]byte(b)) == nil {
		return da == db
	}
	if ba, err := strconv.ParseBool(a); err == nil {
		bb, err := strconv.ParseBool(b)
		return err == nil && ba == bb
	}
	return strings.TrimSpace(a) == strings.TrimSpace(b)
}

// channelTarget is one entry of MOLECULE_WORKSPACES_JSON, with the
// channel's aliases (targets.ts parseWorkspaceTargets).
type channelTarget struct {
	ID               string `json:"id"`
	WorkspaceID      string `json:"workspace_id"`
	Token            string `json:"token"`
	WorkspaceToken   string `json:"workspace_token"`
	TokenFile        string `json:"token_file"`
	PlatformURL      string `json:"platform_url"`
	PlatformURLCamel string `json:"platformUrl"`
}

func (t channelTarget) id() string    { return strings.TrimSpace(first(t.ID, t.WorkspaceID)) }
func (t channelTarget) token() string { return strings.TrimSpace(first(t.Token, t.WorkspaceToken)) }
func (t channelTarget) url() string {
	return strings.TrimRight(strings.TrimSpace(first(t.PlatformURL, t.PlatformURLCamel)), "/")
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// applyWorkspacesJSON turns MOLECULE_WORKSPACES_JSON into the relay's
// lists, paired by position. In the channel it wins over the other
// workspace settings; here those may stay set only where they say the
// same. An entry without platform_url is on MOLECULE_PLATFORM_URL.
func applyWorkspacesJSON(m map[string]string) error {
	const name = "MOLECULE_WORKSPACES_JSON"
	raw := strings.TrimSpace(m[name])
	if raw == "" {
		return nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &entries); err != nil {
		return invalid(name, "not a JSON array of {\"id\", \"token\", \"platform_url\"} objects: %v", err)
	}
	var ids, tokens, urls []string
	for i, e := range entries {
		var ct channelTarget
		if err := json.Unmarshal(e, &ct); err != nil {
			return invalid(name, "entry %d is not an object of strings", i+1) // not echoed: it holds a token
		}
		tok, err := ct.tokenFrom()
		if err != nil {
			return invalid(name, "entry %d: %v", i+1, err)
		}
		u := first(ct.url(), strings.TrimRight(strings.TrimSpace(m["MOLECULE_PLATFORM_URL"]), "/"))
		switch {
		case ct.id() == "" || tok == "":
			return invalid(name, "entry %d needs id and token (or token_file)", i+1)
		case u == "":
			return invalid(name, "entry %d has no platform_url (and MOLECULE_PLATFORM_URL is not set)", i+1)
		case strings.Contains(ct.id()+tok+u, ","):
			return invalid(name, "entry %d holds a comma, which no workspace id, token or URL does", i+1)
		}
		ids, tokens, urls = append(ids, ct.id()), append(tokens, tok), append(urls, u)
	}
	if len(ids) == 0 {
		return invalid(name, "an empty list; name at least one workspace, or unset it")
	}
	if err := singleAmong(m, ids, tokens); err != nil {
		return err
	}
	for k, v := range map[string][]string{"MOLECULE_WORKSPACE_IDS": ids, "MOLECULE_WORKSPACE_TOKENS": tokens, "MOLECULE_PLATFORM_URLS": urls} {
		joined := strings.Join(v, ",")
		if ours, set := m[k]; set && strings.TrimSpace(ours) != "" && normList(ours) != joined {
			return invalid(name, "and %s are both set and disagree; keep one of them", k)
		}
		m[k] = joined
	}
	return nil
}

// singleAmong drops MOLECULE_WORKSPACE_ID when MOLECULE_WORKSPACES_JSON
// names the same workspace (with the same token, if one is set), and
// refuses it otherwise.
func singleAmong(m map[string]string, ids, tokens []string) error {
	id := strings.TrimSpace(m["MOLECULE_WORKSPACE_ID"])
	if id == "" {
		return nil
	}
	for i := range ids {
		if ids[i] != id {
			continue
		}
		if tok := strings.TrimSpace(m["MOLECULE_WORKSPACE_TOKEN"]); tok != "" && tok != tokens[i] {
			return invalid("MOLECULE_WORKSPACES_JSON", "and MOLECULE_WORKSPACE_TOKEN give workspace %s different tokens; keep one of them", id)
		}
		for _, k := range []string{"MOLECULE_WORKSPACE_ID", "MOLECULE_WORKSPACE_TOKEN", "MOLECULE_WORKSPACE_TOKEN_FILE"} {
			delete(m, k)
		}
		return nil
	}
	return invalid("MOLECULE_WORKSPACES_JSON", "does not name MOLECULE_WORKSPACE_ID %s; in the TypeScript channel the JSON list wins over it: unset one of them", id)
}

// normList is a comma-separated list with its entries trimmed (URLs of
// their trailing slash).
func normList(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimRight(strings.TrimSpace(p), "/")
	}
	return strings.Join(parts, ",")
}
