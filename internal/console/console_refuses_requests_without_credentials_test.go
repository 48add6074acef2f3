package console_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/console"
)

// With a token set, nothing but the login page and the page's static
// files answers a request without it: the API says 401, the page sends
// to the login; a wrong bearer token is refused, the right one serves.
func TestConsoleRefusesRequestsWithoutTheToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{Token: "s3cret"})
	c := browserClient(t)
	if resp, _ := f.do(t, c, "GET", "/api/dlq", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API without the token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := f.do(t, c, "GET", "/", ""); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Errorf("page without the token: %d to %q, want a redirect to /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := f.do(t, c, "GET", "/api/dlq", "", "Authorization", "Bearer wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong bearer token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := f.do(t, c, "GET", "/api/dlq", "", "Authorization", "Bearer s3cret"); resp.StatusCode != http.StatusOK {
		t.Errorf("right bearer token: %d, want 200", resp.StatusCode)
	}
	if resp, _ := f.do(t, c, "GET", "/static/app.js", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("static file without the token: %d, want 200 (the login page uses them)", resp.StatusCode)
	}
	f.login(t, c, "s3cret")
	if resp, _ := f.do(t, c, "GET", "/api/dlq", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("API after login: %d, want 200", resp.StatusCode)
	}
}

// With basic auth, every request carries it; a wrong password is
// refused even with a session cookie.
func TestConsoleBasicAuthIsCheckedOnEveryRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{User: "ops", Password: "pw"})
	c := browserClient(t)
	if resp, _ := f.do(t, c, "GET", "/api/dlq", ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no credentials: %d %q, want 401 with a basic challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	good := "Basic b3BzOnB3"            // ops:pw
	bad := "Basic b3BzOnh4"             // ops:xx
	f.csrf(t, c, "Authorization", good) // a session cookie now
	if resp, _ := f.do(t, c, "GET", "/api/dlq", "", "Authorization", bad); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password with a session: %d, want 401", resp.StatusCode)
	}
	if resp, _ := f.do(t, c, "GET", "/api/dlq", "", "Authorization", good); resp.StatusCode != http.StatusOK {
		t.Errorf("right password: %d, want 200", resp.StatusCode)
	}
}

// Without authentication the console listens on loopback only, and
// answers only requests addressed to a loopback host (a page of another
// site that rebinds its name to 127.0.0.1 is refused).
func TestConsoleWithoutAuthServesLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:8090", ":8090", "192.0.2.1:8090", "relay.example.com:8090"} {
		if err := console.CheckListen(addr, console.Options{}); !errors.Is(err, console.ErrInvalidOption) {
			t.Errorf("CheckListen(%q) without auth: %v, want a refusal", addr, err)
		}
		if err := console.CheckListen(addr, console.Options{Token: "t"}); err != nil {
			t.Errorf("CheckListen(%q) with a token: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8090", "localhost:0", "[::1]:8090"} {
		if err := console.CheckListen(addr, console.Options{}); err != nil {
			t.Errorf("CheckListen(%q): %v", addr, err)
		}
	}
	f := newFixture(t, console.Options{})
	c := browserClient(t)
	if resp, _ := f.do(t, c, "GET", "/api/dlq", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("loopback request: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/api/dlq", nil)
	req.Host = "attacker.example:8090"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("request for host attacker.example: %d, want 421", resp.StatusCode)
	}
}
