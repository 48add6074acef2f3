package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/console"
)

// Every action of a browser session carries the session's CSRF token
// (from the page) in X-CSRF-Token: without it, with another session's,
// or from another site, it is refused and nothing is done. The session
// cookie is HttpOnly and SameSite=Strict.
func TestConsoleActionsNeedTheSessionsCSRFToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{Token: "s3cret"})
	c, other := browserClient(t), browserClient(t)
	csrf := f.login(t, c, "s3cret")
	otherCSRF := f.login(t, other, "s3cret")
	for _, ck := range c.Jar.Cookies(mustURL(t, f.srv.URL)) {
		t.Logf("cookie %s", ck.Name)
	}
	resp, _ := f.do(t, browserClient(t), "POST", "/login", "token=s3cret", "Content-Type", "application/x-www-form-urlencoded")
	if ck := resp.Header.Get("Set-Cookie"); !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
		t.Errorf("session cookie %q: want HttpOnly and SameSite=Strict", ck)
	}
	purge := `{"seqs":[1]}`
	for name, h := range map[string][]string{
		"no token":              {"Content-Type", "application/json"},
		"another session's":     {"X-CSRF-Token", otherCSRF},
		"from another site":     {"X-CSRF-Token", csrf, "Sec-Fetch-Site", "cross-site"},
		"with a foreign origin": {"X-CSRF-Token", csrf, "Origin", "https://attacker.example"},
	} {
		if resp, body := f.do(t, c, "POST", "/api/dlq/purge", purge, h...); resp.StatusCode != http.StatusForbidden {
			t.Errorf("purge %s: %d %s, want 403", name, resp.StatusCode, body)
		}
	}
	if resp, body := f.do(t, c, "GET", "/api/dlq", ""); resp.StatusCode != 200 || !strings.Contains(body, `"total":1`) {
		t.Fatalf("after the refused purges: %d %s, want the dead letter still there", resp.StatusCode, body)
	}
	if resp, body := f.do(t, c, "POST", "/api/dlq/purge", purge, "X-CSRF-Token", csrf); resp.StatusCode != 200 || !strings.Contains(body, `"done":true`) {
		t.Fatalf("purge with the token: %d %s", resp.StatusCode, body)
	}
	if _, body := f.do(t, c, "GET", "/api/dlq", ""); !strings.Contains(body, `"total":0`) {
		t.Errorf("after the purge: %s, want no dead letter", body)
	}
}

// A read-only console refuses every action (replay, purge, forget) and
// still lets an operator reveal a body.
func TestReadOnlyConsoleRefusesActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{ReadOnly: true})
	c := browserClient(t)
	csrf := f.csrf(t, c)
	for _, path := range []string{"/api/dlq/replay", "/api/dlq/purge", "/api/conversations/forget"} {
		if resp, body := f.do(t, c, "POST", path, `{"seqs":[1],"workspace_id":"ws-1","conversation":"canvas"}`, "X-CSRF-Token", csrf); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("%s read-only: %d %s, want 403 read-only", path, resp.StatusCode, body)
		}
	}
	if resp, _ := f.do(t, c, "POST", "/api/dlq/1/reveal", "{}", "X-CSRF-Token", csrf); resp.StatusCode != http.StatusOK {
		t.Errorf("reveal read-only: %d, want 200", resp.StatusCode)
	}
}
