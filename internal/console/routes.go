package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

func contextWith(r *http.Request, s session) context.Context {
	return context.WithValue(r.Context(), ctxKey{}, s)
}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(ctxKey{}).(session)
	return s
}

// requestTimeout bounds one API request's reads of NATS.
const requestTimeout = 10 * time.Second

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.index)
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, strings.TrimPrefix(r.URL.Path, "/static/"))
	})
	get := func(pattern string, fn func(*http.Request) (any, error)) {
		mux.HandleFunc("GET "+pattern, c.api(fn))
	}
	act := func(pattern string, fn func(*http.Request) (any, error)) {
		mux.HandleFunc("POST "+pattern, c.api(func(r *http.Request) (any, error) {
			if c.opts.ReadOnly {
				return nil, errReadOnly
			}
			return fn(r)
		}))
	}
	reveal := func(pattern string, fn func(*http.Request) (any, error)) {
		mux.HandleFunc("POST "+pattern, c.api(fn)) // allowed read-only, logged by fn
	}
	get("/api/session", c.sessionInfo)
	get("/api/overview", c.overview)
	get("/api/flow", c.flowSnapshot)
	mux.HandleFunc("GET /api/flow/stream", c.flowStream)
	get("/api/flow/{workspace}/{activity}", c.timeline)
	reveal("/api/flow/{workspace}/{activity}/reveal", c.revealFlow)
	get("/api/dlq", c.dlqList)
	get("/api/dlq/{seq}", c.dlqShow)
	reveal("/api/dlq/{seq}/reveal", c.dlqReveal)
	act("/api/dlq/replay", c.dlqReplay)
	act("/api/dlq/purge", c.dlqPurge)
	get("/api/conversations", c.conversations)
	get("/api/conversations/{workspace}/{conversation}", c.conversation)
	reveal("/api/conversations/{workspace}/{conversation}/reveal", c.revealConversation)
	act("/api/conversations/forget", c.forget)
	get("/api/delegations", c.delegations)
	get("/api/mcp", c.mcpSessions)
	get("/api/nats", c.natsView)
	get("/api/workspaces", c.workspaces)
	act("/api/workspaces/add", c.workspaceAdd)
	act("/api/workspaces/pause", c.workspaceChange("paused"))
	act("/api/workspaces/resume", c.workspaceChange("resumed"))
	act("/api/workspaces/remove", c.workspaceChange("removed"))
	return mux
}

var errReadOnly = errors.New("console: read-only: actions are refused (MOLECULE_CONSOLE_READ_ONLY)")

// httpError is an error with the status to answer it with.
type httpError struct {
	status int
	err    error
}

func (e httpError) Error() string { return e.err.Error() }

func badRequest(err error) error { return httpError{http.StatusBadRequest, err} }

// api serves fn's value as JSON, or its error with a status.
func (c *Console) api(fn func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		v, err := fn(r.WithContext(ctx))
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			status := http.StatusInternalServerError
			var he httpError
			switch {
			case errors.As(err, &he):
				status = he.status
			case errors.Is(err, errReadOnly):
				status = http.StatusForbidden
			}
			if status >= 500 {
				c.log.Warn("console: request failed", "path", r.URL.Path, "error", err)
			}
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	}
}

// decodeBody reads a JSON action body into v.
func decodeBody(r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(nil, r.Body, 1<<20)
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		return badRequest(errors.New("console: the request body is not the JSON expected: " + err.Error()))
	}
	return nil
}

// index serves the page with the session's CSRF token in a meta tag
// (the token is hex: nothing to escape).
func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(strings.Replace(string(b), "{{csrf}}", sessionOf(r).csrf, 1)))
}

func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	name = path.Clean(name)
	b, err := fs.ReadFile(static, "static/"+name)
	if err != nil || name == "index.html" {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	_, _ = w.Write(b)
}

// sessionView is what the page learns of its session.
type sessionView struct {
	ReadOnly bool      `json:"read_only"`
	Started  time.Time `json:"started"`
	Auth     string    `json:"auth"`
}

func (c *Console) sessionInfo(*http.Request) (any, error) {
	auth := "none (loopback only)"
	switch {
	case c.opts.basic():
		auth = "basic"
	case c.opts.Token != "":
		auth = "token"
	}
	return sessionView{ReadOnly: c.opts.ReadOnly, Started: c.start, Auth: auth}, nil
}
