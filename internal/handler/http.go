package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// userAgent is sent by the http: and openai: handlers.
const userAgent = "molecule-relay"

// StatusError is returned when an http: or openai: server answers with a
// status other than 2xx. It matches ErrPermanent for a 4xx status other
// than 408 (Request Timeout) and 429 (Too Many Requests); 5xx and the rest
// are retried.
type StatusError struct {
	// URL is the request URL without credentials or query.
	URL string
	// Code is the HTTP status code.
	Code int
	// Message is the server's error message (from a JSON error body) or the
	// start of the body, at most 512 bytes.
	Message string
	// RetryAfter is the server's Retry-After, when it sent one in seconds.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("handler: POST %s: %d %s", e.URL, e.Code, http.StatusText(e.Code))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is makes errors.Is(err, ErrPermanent) true for a permanent status.
func (e *StatusError) Is(target error) bool {
	return target == ErrPermanent && permanentStatus(e.Code)
}

func permanentStatus(code int) bool {
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

type httpHandler struct {
	url     string
	display string
	opts    Options
}

// NewHTTP returns the http: handler. Each call POSTs the Payload JSON to
// rawURL. The reply is the "reply" string of a JSON object body
// ({"reply": "..."}; an object without it means no reply), a JSON string
// body, or else the trimmed text body; a body of Content-Type
// AnswerContentType (or any body, with Options.AnswerJSON) is a
// structured answer (ParseAnswer). A non-2xx answer is a *StatusError.
func NewHTTP(rawURL string, opts Options) (Handler, error) {
	opts.SetDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	u, err := parseHTTPURL("http", rawURL)
	if err != nil {
		return nil, err
	}
	return &httpHandler{url: u.String(), display: displayURL(u), opts: opts}, nil
}

func (h *httpHandler) String() string { return "http:" + h.display }

// Handle posts the payload; the answer's text is the reply.
func (h *httpHandler) Handle(ctx context.Context, req *Request) (string, error) {
	return textOf(h.Answer(ctx, req))
}

// Answer posts the payload. The body is a structured answer (ParseAnswer)
// when the server says Content-Type AnswerContentType or
// Options.AnswerJSON is set; else the reply text as NewHTTP describes.
func (h *httpHandler) Answer(ctx context.Context, req *Request) (Answer, error) {
	body, err := marshalPayload(req)
	if err != nil {
		return Answer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	stop := keepAlive(ctx, req, h.opts.ProgressInterval)
	defer stop()

	data, ctype, err := post(ctx, h.opts, h.url, h.display, body, nil)
	if err != nil {
		return Answer{}, err
	}
	var a Answer
	if h.opts.AnswerJSON || isAnswerType(ctype) {
		a, err = ParseAnswer(data)
	} else {
		a.Text, err = httpReply(data, ctype)
	}
	if err != nil {
		return Answer{}, fmt.Errorf("handler: POST %s: %w", h.display, err)
	}
	loggerOf(req).Debug("http handler done", "url", h.display, "reply_bytes", len(a.Text), "attachments", len(a.Attachments))
	return a, nil
}

// httpReply extracts the reply from a 2xx body.
func httpReply(data []byte, ctype string) (string, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return "", nil
	}
	looksJSON := strings.Contains(ctype, "json") || trimmed[0] == '{' || trimmed[0] == '"'
	if looksJSON {
		var v any
		if err := json.Unmarshal(trimmed, &v); err == nil {
			switch v := v.(type) {
			case map[string]any:
				switch r := v["reply"].(type) {
				case nil:
					return "", nil
				case string:
					return strings.TrimSpace(r), nil
				default:
					return "", fmt.Errorf("%w: \"reply\" is a JSON %T, want a string", ErrPermanent, r)
				}
			case string:
				return strings.TrimSpace(v), nil
			}
		}
	}
	return string(trimmed), nil
}

// post sends one JSON POST and returns a 2xx body, or a *StatusError, or a
// transport error (retried). header adds request headers.
func post(ctx context.Context, opts Options, url, display string, body []byte, header http.Header) ([]byte, string, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, "", fmt.Errorf("%w: POST %s: %v", ErrPermanent, display, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.1")
	hreq.Header.Set("User-Agent", userAgent)
	for k, vs := range header {
		hreq.Header[k] = vs
	}
	resp, err := opts.HTTPClient.Do(hreq)
	if err != nil {
		return nil, "", fmt.Errorf("handler: POST %s: %w", display, scrubURLError(err))
	}
	defer resp.Body.Close()
	data, overflow, err := readCapped(resp.Body, opts.MaxOutputBytes)
	if err != nil {
		return nil, "", fmt.Errorf("handler: POST %s: read response: %w", display, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &StatusError{URL: display, Code: resp.StatusCode, Message: errorMessage(data)}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			se.RetryAfter = time.Duration(s) * time.Second
		}
		return nil, "", se
	}
	if overflow {
		return nil, "", fmt.Errorf("%w: POST %s answered more than %d bytes", ErrOutputTooLarge, display, opts.MaxOutputBytes)
	}
	return data, resp.Header.Get("Content-Type"), nil
}

// errorMessage takes a short message from an error body: the "error"
// (string, or object with "message") of a JSON body, else the body's start.
func errorMessage(data []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	msg := ""
	if json.Unmarshal(data, &e) == nil {
		var s string
		var obj struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(e.Error, &s) == nil && s != "":
			msg = s
		case json.Unmarshal(e.Error, &obj) == nil && obj.Message != "":
			msg = obj.Message
		case e.Message != "":
			msg = e.Message
		}
	}
	if msg == "" {
		msg = string(bytes.TrimSpace(data))
	}
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return msg
}

// scrubURLError drops the URL (which may hold credentials or a query
// token) from a transport error, keeping the cause.
func scrubURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
