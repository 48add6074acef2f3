package main

import (
	"strings"
	"testing"
)

// Every variable of the configuration has a description in the help of
// the commands that read them all (issue 41: 8 settings of connect -h had
// none): a new setting without one fails here, naming it.
func TestEverySettingHasADescription(t *testing.T) {
	described := map[string]bool{}
	for _, g := range commandGroups("connect") {
		for _, s := range g.vars {
			if strings.TrimSpace(s.help) != "" {
				described[s.env] = true
			}
		}
	}
	for env := range configVars() {
		if !described[env] {
			t.Errorf("%s has no description in settings.go's groups", env)
		}
	}
	for _, cmd := range []string{"connect", "mcp"} {
		r := runCLI(t, nil, cmd, "-h")
		if strings.Contains(r.stdout, "Other settings") {
			t.Errorf("%s -h lists settings without a description:\n%s", cmd, r.stdout[strings.Index(r.stdout, "Other settings"):])
		}
	}
}
