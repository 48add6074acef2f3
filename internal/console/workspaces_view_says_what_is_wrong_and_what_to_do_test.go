package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/registry"
)

// A console whose relay does not follow the registry says so, and how to
// turn it on (the settings' names), and refuses every change with the
// same words.
func TestWorkspacesViewWithoutTheRegistrySaysHowToTurnItOn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	c := browserClient(t)
	csrf := f.csrf(t, c)
	how := []string{"registry is off", "MOLECULE_WORKSPACE_REGISTRY=true", "MOLECULE_REGISTRY_KEY_FILE", "MOLECULE_REGISTRY_KEY", "restart"}
	if resp, body := f.do(t, c, "GET", "/api/workspaces", ""); resp.StatusCode != http.StatusOK || !contains(body, how...) || !strings.Contains(body, `"on":false`) {
		t.Errorf("view without the registry: %d %s, want it off and how to turn it on", resp.StatusCode, body)
	}
	for _, path := range []string{"/api/workspaces/add", "/api/workspaces/pause", "/api/workspaces/remove"} {
		if resp, body := f.do(t, c, "POST", path, addBody, "X-CSRF-Token", csrf); resp.StatusCode != http.StatusConflict || !contains(body, how...) {
			t.Errorf("%s without the registry: %d %s, want 409 and how to turn it on", path, resp.StatusCode, body)
		}
	}
}

// A change the console cannot make is answered with what is wrong and
// what to do, never with the token given.
func TestWorkspaceChangesRefusedInPlainWords(t *testing.T) {
	t.Parallel()
	var reg *registry.Registry
	f := newFixture(t, console.Options{}, withRegistry(t, &reg))
	c := browserClient(t)
	csrf := f.csrf(t, c)
	if resp, body := f.do(t, c, "POST", "/api/workspaces/add", addBody, "X-CSRF-Token", csrf); resp.StatusCode != http.StatusOK {
		t.Fatalf("add: %d %s", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             []string
	}{
		{"already there", "/api/workspaces/add", addBody, http.StatusConflict, []string{"ws-a is already in the registry", "remove it and add it again"}},
		{"no platform URL", "/api/workspaces/add", `{"id":"ws-c","token":"` + wsToken + `"}`, http.StatusBadRequest, []string{"not an http(s) address", "platform's base URL"}},
		{"a platform URL without scheme", "/api/workspaces/add", `{"id":"ws-c","platform_url":"acme.example","token":"` + wsToken + `"}`, http.StatusBadRequest, []string{`\"acme.example\" is not an http(s) address`}},
		{"no token", "/api/workspaces/add", `{"id":"ws-c","platform_url":"https://acme.example","token":"  "}`, http.StatusBadRequest, []string{"no token", "paste the workspace's token"}},
		{"a bad id", "/api/workspaces/add", `{"id":"ws c/1","platform_url":"https://acme.example","token":"` + wsToken + `"}`, http.StatusBadRequest, []string{`workspace id \"ws c/1\"`, "use the workspace's UUID"}},
		{"not JSON", "/api/workspaces/add", `id=ws-c&token=` + wsToken, http.StatusBadRequest, []string{"not the JSON expected"}},
		{"pause an unknown workspace", "/api/workspaces/pause", `{"id":"ws-z"}`, http.StatusNotFound, []string{"ws-z is not in the registry", "reload the list"}},
		{"remove an unknown workspace", "/api/workspaces/remove", `{"id":"ws-z"}`, http.StatusNotFound, []string{"ws-z is not in the registry"}},
	} {
		resp, body := f.do(t, c, "POST", tc.path, tc.body, "X-CSRF-Token", csrf)
		if resp.StatusCode != tc.status || !contains(body, tc.want...) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, resp.StatusCode, body, tc.status, tc.want)
		}
		if strings.Contains(body, wsToken) {
			t.Errorf("%s: the answer carries the token: %s", tc.name, body)
		}
	}
	if all, _ := reg.List(t.Context()); len(all) != 1 {
		t.Errorf("registry after the refusals: %v, want only ws-a", all)
	}
	if strings.Contains(f.logs.String(), wsToken) {
		t.Errorf("the log holds the token")
	}
}
