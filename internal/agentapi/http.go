package agentapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// maxBody caps a request body.
const maxBody = 1 << 20

// Endpoints lists the API for the 404 answer and the docs.
const Endpoints = "POST /v1/interim, POST /v1/ask, GET /v1/peers, GET /v1/discover/{id}, GET /v1/secrets, GET /v1/files?uri="

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/interim", s.authed(s.postInterim))
	mux.HandleFunc("POST /v1/ask", s.authed(s.postAsk))
	mux.HandleFunc("GET /v1/peers", s.authed(s.getPeers))
	mux.HandleFunc("GET /v1/discover/{id}", s.authed(s.getDiscover))
	mux.HandleFunc("GET /v1/secrets", s.authed(s.getSecrets))
	mux.HandleFunc("GET /v1/files", s.authed(s.getFile))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + r.Method + " " + r.URL.Path + "; the agent API has " + Endpoints})
	})
	return mux
}

// authed resolves the capability token ("Authorization: Bearer <token>")
// to its live session, or answers 401.
func (s *Server) authed(fn func(http.ResponseWriter, *http.Request, *Session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sess := s.session(strings.TrimSpace(tok))
		if !ok || sess == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unknown or ended capability token; send \"Authorization: Bearer $MOLECULE_AGENT_TOKEN\" of the message being handled, while its handler runs"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		ctx, cancel := sess.callContext(r.Context())
		defer cancel()
		fn(w, r.WithContext(ctx), sess)
	}
}

// fromJSON converts attachments as the API takes them (the structured
// answer's shape) to the envelope's.
func fromJSON(in []events.AttachmentJSON) []events.Attachment {
	var out []events.Attachment
	for _, a := range in {
		out = append(out, a.Attachment())
	}
	return out
}

func (s *Server) postInterim(w http.ResponseWriter, r *http.Request, sess *Session) {
	var body struct {
		Text        string                  `json:"text"`
		Attachments []events.AttachmentJSON `json:"attachments"`
	}
	if err := decode(r, &body, `{"text": "working on it…"}`); err != nil {
		writeError(w, err)
		return
	}
	res, err := sess.interim(r.Context(), handler.Interim{Text: body.Text, Attachments: fromJSON(body.Attachments)})
	if err != nil {
		s.cfg.Logger.WarnContext(sess.base, "agentapi: interim failed", "workspace", sess.in.WorkspaceID, "activity", sess.in.ActivityID, "error", err)
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) postAsk(w http.ResponseWriter, r *http.Request, sess *Session) {
	var body struct {
		PeerID         string                  `json:"peer_id"`
		Text           string                  `json:"text"`
		Attachments    []events.AttachmentJSON `json:"attachments"`
		TimeoutSeconds float64                 `json:"timeout_seconds"`
	}
	if err := decode(r, &body, `{"peer_id": "<workspace id>", "text": "…", "timeout_seconds": 60}`); err != nil {
		writeError(w, err)
		return
	}
	q := handler.Question{PeerID: body.PeerID, Text: body.Text, Attachments: fromJSON(body.Attachments),
		Timeout: time.Duration(body.TimeoutSeconds * float64(time.Second))}
	ans, err := sess.Ask(r.Context(), q)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

func (s *Server) getPeers(w http.ResponseWriter, r *http.Request, sess *Session) {
	peers, err := sess.Peers(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, peers)
}

func (s *Server) getDiscover(w http.ResponseWriter, r *http.Request, sess *Session) {
	d, err := sess.Discover(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) getSecrets(w http.ResponseWriter, r *http.Request, sess *Session) {
	sec, err := sess.Secrets(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sec)
}

// decode reads a JSON body into v, refusing unknown keys; example shows
// the expected form in the error.
func decode(r *http.Request, v any, example string) error {
	if err := handler.DecodeStrictJSON(r.Body, v); err != nil {
		return fmt.Errorf("%w: body is not valid: %v; send JSON like %s", ErrBadRequest, err, example)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
