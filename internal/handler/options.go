package handler

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Defaults of Options, applied by SetDefaults.
const (
	// DefaultTimeout bounds one handler call.
	DefaultTimeout = 5 * time.Minute
	// DefaultOpenAIModel is the model the openai: handler asks for. It is
	// OpenAI's small general model; any other server (vLLM, Ollama, a
	// hermes gateway) serves its own model names, so set OpenAIModel
	// (MOLECULE_OPENAI_MODEL) for those.
	DefaultOpenAIModel = "gpt-4o-mini"
	// DefaultMaxOutputBytes caps a reply: exec's stdout, an http: or
	// openai: response body.
	DefaultMaxOutputBytes = 1 << 20
	// DefaultProgressInterval is how often a built-in handler reports
	// progress while it waits.
	DefaultProgressInterval = 5 * time.Second
)

// ErrInvalidOptions is matched by Options.Validate's errors.
var ErrInvalidOptions = errors.New("handler: invalid options")

// Options configure the built-in handlers. The zero value is valid: every
// field has a default, applied by SetDefaults (Parse applies them).
type Options struct {
	// Timeout bounds one call of the handler (the earlier of it and the
	// context's deadline wins). If not set, DefaultTimeout (5 minutes).
	Timeout time.Duration
	// HTTPClient sends the http: and openai: requests. If not set, a
	// client of its own with no overall timeout (Timeout bounds each call).
	HTTPClient *http.Client
	// OpenAIModel is the "model" of an openai: request. If not set,
	// DefaultOpenAIModel.
	OpenAIModel string
	// OpenAISystemPrompt is sent as the first, "system", message of an
	// openai: request. If not set, no system message is sent.
	OpenAISystemPrompt string
	// OpenAIAPIKey is sent as "Authorization: Bearer <key>" by the openai:
	// handler. The caller reads it (OPENAI_API_KEY); it is never logged and
	// is scrubbed from error messages. If not set, no Authorization header
	// is sent (local servers such as Ollama need none).
	OpenAIAPIKey string
	// Env is extra environment ("KEY=value") for exec: programs. The
	// relay's own environment is NOT inherited, so secrets such as the
	// workspace token never reach a handler program; only PATH, HOME,
	// LANG and TZ are passed through, then Env is added (a key in Env
	// overrides a passed-through one). The relay fills it with the
	// variables MOLECULE_HANDLER_ENV names.
	Env []string
	// MaxOutputBytes caps a reply (exec's stdout, an HTTP response body);
	// a bigger one is a permanent error. If not set, DefaultMaxOutputBytes
	// (1 MiB).
	MaxOutputBytes int64
	// AnswerJSON makes the exec: and http: handlers read every answer as
	// a structured answer (ParseAnswer): stdout, or the response body. If
	// not set, an http: server opts in per response with Content-Type
	// AnswerContentType, and exec: answers plain text.
	AnswerJSON bool
	// ProgressInterval is how often a built-in handler calls
	// Request.Progress while it waits for the program or server. If not
	// set, DefaultProgressInterval (5 seconds).
	ProgressInterval time.Duration
}

// SetDefaults fills every unset field with its default.
func (o *Options) SetDefaults() {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.OpenAIModel == "" {
		o.OpenAIModel = DefaultOpenAIModel
	}
	if o.MaxOutputBytes == 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
}

// Validate reports the first invalid field, matching ErrInvalidOptions.
func (o *Options) Validate() error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("%w: timeout %s is negative", ErrInvalidOptions, o.Timeout)
	case o.MaxOutputBytes < 0:
		return fmt.Errorf("%w: max output bytes %d is negative", ErrInvalidOptions, o.MaxOutputBytes)
	case o.ProgressInterval < 0:
		return fmt.Errorf("%w: progress interval %s is negative", ErrInvalidOptions, o.ProgressInterval)
	}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("%w: env entry %q is not KEY=value", ErrInvalidOptions, kv)
		}
	}
	return nil
}

// LogValue logs the options without the API key and the environment
// values.
func (o Options) LogValue() slog.Value {
	keys := make([]string, 0, len(o.Env))
	for _, kv := range o.Env {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	return slog.GroupValue(
		slog.Duration("timeout", o.Timeout),
		slog.String("openai_model", o.OpenAIModel),
		slog.Bool("openai_system_prompt", o.OpenAISystemPrompt != ""),
		slog.Bool("openai_api_key", o.OpenAIAPIKey != ""),
		slog.Any("env_keys", keys),
		slog.Int64("max_output_bytes", o.MaxOutputBytes),
		slog.Duration("progress_interval", o.ProgressInterval),
		slog.Bool("answer_json", o.AnswerJSON),
	)
}
