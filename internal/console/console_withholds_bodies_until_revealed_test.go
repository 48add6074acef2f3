package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/console"
)

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A dead letter's list and detail withhold its message (and name what
// they withheld); a reveal returns it and logs, at info, who revealed
// which one, without the body.
func TestConsoleWithholdsBodiesUntilRevealedAndLogsTheReveal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	c := browserClient(t)
	csrf := f.csrf(t, c)
	for _, path := range []string{"/api/dlq", "/api/dlq/1", "/api/dlq?q=private"} {
		resp, body := f.do(t, c, "GET", path, "")
		if resp.StatusCode != 200 || strings.Contains(body, secretText) {
			t.Errorf("%s: %d %s: the body must be withheld", path, resp.StatusCode, body)
		}
	}
	if _, body := f.do(t, c, "GET", "/api/dlq/1", ""); !strings.Contains(body, "envelope.text") {
		t.Errorf("detail %s: want it to name what it withheld", body)
	}
	if strings.Contains(f.logs.String(), "revealed") {
		t.Fatal("a reveal was logged before any")
	}
	resp, body := f.do(t, c, "POST", "/api/dlq/1/reveal", "{}", "X-CSRF-Token", csrf)
	if resp.StatusCode != 200 || !strings.Contains(body, secretText) {
		t.Fatalf("reveal: %d %s", resp.StatusCode, body)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "level=INFO") || !strings.Contains(logs, "message body revealed") || !strings.Contains(logs, "seq=1") {
		t.Errorf("log after a reveal: %q, want an info line naming the dead letter", logs)
	}
	if strings.Contains(logs, secretText) {
		t.Errorf("the log holds the body: %q", logs)
	}
}

// Every answer carries a Content-Security-Policy that allows only the
// console's own files, and the page needs nothing else: no inline
// script, style or handler, no other origin.
func TestConsolePageRunsUnderAStrictContentSecurityPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	c := browserClient(t)
	for _, path := range []string{"/", "/static/app.js", "/api/dlq", "/api/nope"} {
		resp, _ := f.do(t, c, "GET", path, "")
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
	}
	for _, page := range []string{"/", "/login"} {
		resp, body := f.do(t, c, "GET", page, "")
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: %d", page, resp.StatusCode)
		}
		for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1) {
			if !strings.Contains(tag, ` src="/static/`) {
				t.Errorf("%s: %s is not a file of the console", page, tag)
			}
		}
		for _, bad := range []*regexp.Regexp{
			regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`),     // inline script
			regexp.MustCompile(`\son[a-z]+=`),                  // an inline handler
			regexp.MustCompile(`\sstyle=|<style`),              // inline style
			regexp.MustCompile(`(?:src|href)="(?:https?:)?//`), // another origin
		} {
			if bad.MatchString(body) {
				t.Errorf("%s matches %s: the CSP would block it", page, bad)
			}
		}
	}
}
