package console_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// withRegistry opens the workspace registry on the fixture's NATS, as a
// relay that ensures its topology does, and gives it to the console.
func withRegistry(t *testing.T, reg **registry.Registry) func(jetstream.JetStream, *console.Options) {
	return func(js jetstream.JetStream, o *console.Options) {
		key, _, err := registry.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if *reg, err = registry.Open(pipelinetest.Ctx(t), js, key, true, 1); err != nil {
			t.Fatal(err)
		}
		if err := (*reg).Start(pipelinetest.Ctx(t), nil, nil); err != nil { // as a relay follows it
			t.Fatal(err)
		}
		o.Registry = *reg
	}
}

// wsToken is the token of the workspaces the tests add: no answer and no
// log line may carry it.
const wsToken = "ws-token-never-shown"

const addBody = `{"id":"ws-a","platform_url":"https://acme.example","org_id":"org-1","token":"` + wsToken + `"}`

// Every change of the registry is a POST that needs the console's
// credentials and the session's CSRF token: without them it is refused
// and the registry is unchanged; with them it adds (the token sealed in
// the registry), pauses, resumes and removes. The list and the answers
// never carry the token, nor does the console's log.
func TestWorkspaceChangesNeedTheCredentialsAndTheCSRFToken(t *testing.T) {
	t.Parallel()
	var reg *registry.Registry
	f := newFixture(t, console.Options{Token: "s3cret"}, withRegistry(t, &reg))
	c, other := browserClient(t), browserClient(t)
	csrf := f.login(t, c, "s3cret")
	otherCSRF := f.login(t, other, "s3cret")
	if resp, _ := f.do(t, browserClient(t), "GET", "/api/workspaces", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("list without credentials: %d, want 401", resp.StatusCode)
	}
	for name, req := range map[string]struct {
		c *http.Client
		h []string
	}{
		"without credentials":        {browserClient(t), []string{"Content-Type", "application/json"}},
		"without the CSRF token":     {c, []string{"Content-Type", "application/json"}},
		"with another session's":     {c, []string{"X-CSRF-Token", otherCSRF}},
		"from another site":          {c, []string{"X-CSRF-Token", csrf, "Sec-Fetch-Site", "cross-site"}},
		"with a wrong bearer token":  {&http.Client{}, []string{"Authorization", "Bearer guess"}},
		"as a GET with a CSRF token": {c, []string{"X-CSRF-Token", csrf}},
	} {
		method := "POST"
		if strings.HasPrefix(name, "as a GET") {
			method = "GET"
		}
		resp, body := f.do(t, req.c, method, "/api/workspaces/add", addBody, req.h...)
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("add %s: %d %s, want it refused", name, resp.StatusCode, body)
		}
	}
	ctx := pipelinetest.Ctx(t)
	if all, err := reg.List(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after the refused adds: %v %v, want an empty registry", all, err)
	}

	post := func(path, body string) string {
		t.Helper()
		resp, out := f.do(t, c, "POST", path, body, "X-CSRF-Token", csrf)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		if strings.Contains(out, wsToken) {
			t.Errorf("%s answers with the token: %s", path, out)
		}
		return out
	}
	list := func() string {
		t.Helper()
		_, out := f.do(t, c, "GET", "/api/workspaces", "")
		if strings.Contains(out, wsToken) {
			t.Errorf("the list carries the token: %s", out)
		}
		return out
	}
	post("/api/workspaces/add", addBody)
	if e, err := reg.Get(ctx, "ws-a"); err != nil || e.Token != wsToken || e.PlatformURL != "https://acme.example" || e.OrgID != "org-1" || e.Paused {
		t.Fatalf("added entry: %+v %v", e, err)
	}
	if l := list(); !contains(l, `"on":true`, `"writable":true`, `"id":"ws-a"`, `"org_id":"org-1"`, `"paused":false`) {
		t.Errorf("list after the add: %s", l)
	}
	for _, step := range []struct {
		verb   string
		paused bool
	}{{"pause", true}, {"resume", false}} {
		post("/api/workspaces/"+step.verb, `{"id":"ws-a"}`)
		if e, err := reg.Get(ctx, "ws-a"); err != nil || e.Paused != step.paused || e.Token != wsToken {
			t.Errorf("after %s: paused %v (token kept: %v) %v, want paused %v", step.verb, e.Paused, e.Token == wsToken, err, step.paused)
		}
	}
	post("/api/workspaces/remove", `{"id":"ws-a"}`)
	if _, err := reg.Get(ctx, "ws-a"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("after remove: %v, want not found", err)
	}
	logs := f.logs.String()
	if strings.Contains(logs, wsToken) {
		t.Errorf("the console's log holds the token:\n%s", logs)
	}
	if !contains(logs, "workspace added to the registry", "workspace paused", "workspace resumed", "workspace removed") {
		t.Errorf("log %q: want each change logged", logs)
	}
}

// A read-only console lists the registry and refuses every change.
func TestReadOnlyConsoleRefusesWorkspaceChanges(t *testing.T) {
	t.Parallel()
	var reg *registry.Registry
	f := newFixture(t, console.Options{ReadOnly: true}, withRegistry(t, &reg))
	ctx := pipelinetest.Ctx(t)
	if err := reg.Put(ctx, registry.Entry{ID: "ws-b", PlatformURL: "https://acme.example", Token: wsToken}); err != nil {
		t.Fatal(err)
	}
	c := browserClient(t)
	csrf := f.csrf(t, c)
	for _, path := range []string{"/api/workspaces/add", "/api/workspaces/pause", "/api/workspaces/remove"} {
		if resp, body := f.do(t, c, "POST", path, `{"id":"ws-b","platform_url":"https://acme.example","token":"x"}`, "X-CSRF-Token", csrf); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("%s read-only: %d %s, want 403 read-only", path, resp.StatusCode, body)
		}
	}
	if e, err := reg.Get(ctx, "ws-b"); err != nil || e.Paused {
		t.Errorf("after the refused changes: %+v %v, want ws-b there, active", e, err)
	}
	if _, body := f.do(t, c, "GET", "/api/workspaces", ""); !strings.Contains(body, `"id":"ws-b"`) {
		t.Errorf("read-only list: %s", body)
	}
}
