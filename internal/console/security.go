package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// contentSecurityPolicy allows only the console's own files: no inline
// script or style, no other origin, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// sessionCookie names the console's session: HttpOnly, SameSite=Strict,
// set once a request authenticated.
const sessionCookie = "molecule_console"

// CSRFHeader carries the session's CSRF token on every action.
const CSRFHeader = "X-CSRF-Token"

// maxSessions bounds the sessions kept; the oldest goes first.
const maxSessions = 1000

// sessionTTL is how long a session lives after it was made.
const sessionTTL = 12 * time.Hour

type session struct {
	csrf    string
	created time.Time
}

type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

func newSessions() *sessions { return &sessions{m: map[string]session{}} }

func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *sessions) create() (id string, sess session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		var oldest string
		for k, v := range s.m {
			if oldest == "" || v.created.Before(s.m[oldest].created) {
				oldest = k
			}
		}
		delete(s.m, oldest)
	}
	id, sess = randomToken(), session{csrf: randomToken(), created: time.Now()}
	s.m[id] = sess
	return id, sess
}

func (s *sessions) get(id string) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if ok && time.Since(v.created) > sessionTTL {
		delete(s.m, id)
		return session{}, false
	}
	return v, ok
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// requestSession is the session of r, if it carries a live one.
func (c *Console) requestSession(r *http.Request) (session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	return c.sess.get(ck.Value)
}

func (c *Console) startSession(w http.ResponseWriter, r *http.Request) session {
	id, s := c.sess.create()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds())})
	return s
}

type ctxKey struct{}

// guard authenticates r and checks every action's CSRF token:
//   - without authentication configured the Host must be loopback (a
//     page of another site cannot reach the console by rebinding a name);
//   - a bearer token authenticates a program, which carries no ambient
//     credential and needs no CSRF token;
//   - a browser authenticates once (basic auth, or the token on the login
//     page) and then carries a session cookie; its actions carry the
//     session's CSRF token in CSRFHeader, and are refused from another
//     origin (http.CrossOriginProtection) before that.
func (c *Console) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.opts.auth() {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopbackHost(host) {
				http.Error(w, "console: this console serves loopback only (no authentication is set)", http.StatusMisdirectedRequest)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/static/") && safeMethod(r.Method) {
			next.ServeHTTP(w, r) // the page's own files hold nothing secret (the login page uses them)
			return
		}
		if r.URL.Path == "/login" {
			c.login(w, r)
			return
		}
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && c.opts.Token != "" {
			if !equal(bearer, c.opts.Token) {
				c.refuse(w, r)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		s, ok := c.requestSession(r)
		if !ok {
			if !c.authenticated(r) {
				c.refuse(w, r)
				return
			}
			s = c.startSession(w, r)
		} else if c.opts.basic() && !c.authenticated(r) {
			// Basic auth is sent on every request; a wrong one ends here.
			c.refuse(w, r)
			return
		}
		if !safeMethod(r.Method) && !equal(r.Header.Get(CSRFHeader), s.csrf) {
			http.Error(w, "console: missing or wrong "+CSRFHeader, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(contextWith(r, s)))
	}))
}

func safeMethod(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// authenticated says whether r carries the credentials configured
// (none configured: every loopback request).
func (c *Console) authenticated(r *http.Request) bool {
	switch {
	case c.opts.basic():
		u, p, ok := r.BasicAuth()
		return ok && equal(u, c.opts.User) && equal(p, c.opts.Password)
	case c.opts.Token != "":
		return false // the login page or a bearer token
	}
	return true
}

func (c *Console) refuse(w http.ResponseWriter, r *http.Request) {
	switch {
	case c.opts.basic():
		w.Header().Set("WWW-Authenticate", `Basic realm="molecule-relay console", charset="UTF-8"`)
		http.Error(w, "console: authentication required", http.StatusUnauthorized)
	case strings.HasPrefix(r.URL.Path, "/api/"):
		http.Error(w, "console: authentication required (a bearer token, or the login page)", http.StatusUnauthorized)
	default:
		http.Redirect(w, r, "/login", http.StatusSeeOther)
	}
}

// login serves the token form and checks it. A wrong token waits a
// little, so guessing is slow.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	switch r.Method {
	case http.MethodGet:
		serveAsset(w, r, "login.html")
	case http.MethodPost:
		if !equal(r.PostFormValue("token"), c.opts.Token) {
			time.Sleep(500 * time.Millisecond)
			c.log.Warn("console: login refused: wrong token", "remote", r.RemoteAddr)
			http.Redirect(w, r, "/login?failed=1", http.StatusSeeOther)
			return
		}
		c.startSession(w, r)
		http.Redirect(w, r, "/", http.StatusSeeOther)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
