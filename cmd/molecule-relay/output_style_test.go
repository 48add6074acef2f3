package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Every log line of a whole pipeline names its stage at most once (the
// runtime, the stage runner and the Lambda wrapper each used to add one).
func TestEveryLogLineNamesItsStageOnce(t *testing.T) {
	t.Parallel()
	r := runCLI(t, []string{"MOLECULE_LOG_LEVEL=debug", "NATS_STORE_DIR=" + t.TempDir()}, "dev", "--once", "--timeout", "30s")
	if r.code != exitOK {
		t.Fatalf("dev --once: exit %d\n%s", r.code, r.stderr)
	}
	staged := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		switch n := strings.Count(l, " stage="); {
		case n > 1:
			t.Errorf("stage appears %d times: %s", n, l)
		case n == 1:
			staged++
		}
	}
	if staged == 0 {
		t.Fatalf("no line names a stage:\n%s", r.stderr)
	}
}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkSnakeKeys fails on any object key of v that is not snake_case,
// skipping the values of the keys in free (maps keyed by data).
func checkSnakeKeys(t *testing.T, path string, v any, free map[string]bool) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if !snakeKey.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case", path, k)
			}
			if !free[k] {
				checkSnakeKeys(t, path+"."+k, e, free)
			}
		}
	case []any:
		for _, e := range v {
			checkSnakeKeys(t, path+"[]", e, free)
		}
	}
}

// The connect --once --json report uses snake_case keys throughout, the
// poll results inside it included.
func TestOnceJSONReportKeysAreSnakeCase(t *testing.T) {
	t.Parallel()
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("json-agent")
	r := runCLI(t, []string{"MOLECULE_PLATFORM_URL=" + srv.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_STORE_DIR=" + t.TempDir(), "MOLECULE_LOG_LEVEL=warn"}, "connect", "--once", "--json", "--idle", "200ms")
	if r.code != exitOK {
		t.Fatalf("connect --once --json: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, r.stdout)
	}
	if _, ok := rep["poll"]; !ok {
		t.Fatalf("report has no poll results: %s", r.stdout)
	}
	checkSnakeKeys(t, "report", rep, map[string]bool{"skipped": true})
	if !strings.Contains(r.stdout, `"workspace_id": "`+ws.ID+`"`) {
		t.Errorf("report lacks workspace_id:\n%s", r.stdout)
	}
}
