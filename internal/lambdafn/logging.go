package lambdafn

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/molecule-ai/molecule-relay/internal/config"
)

// requestLog is a slog.Handler that adds the invocation's request id
// ("requestId", as aws-lambda-go's lambdacontext.NewLogHandler names it) to
// every record. aws-lambda-go's handler reads it from the record's context,
// but the stage cores log without one (log.Info, not log.InfoContext), so
// the id of the invocation in progress is also kept here: an execution
// environment runs one invocation at a time.
type requestLog struct {
	inner slog.Handler
	id    *atomic.Pointer[string]
}

func (h *requestLog) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *requestLog) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	} else if id := h.id.Load(); id != nil {
		r.AddAttrs(slog.String("requestId", *id))
	}
	return h.inner.Handle(ctx, r)
}

func (h *requestLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &requestLog{inner: h.inner.WithAttrs(as), id: h.id}
}

func (h *requestLog) WithGroup(name string) slog.Handler {
	return &requestLog{inner: h.inner.WithGroup(name), id: h.id}
}

// lambdaLogger builds the logger of a function under the Lambda runtime.
// The function's logging configuration wins over MOLECULE_LOG_*: with
// LoggingConfig LogFormat JSON, Lambda sets AWS_LAMBDA_LOG_FORMAT=JSON and
// AWS_LAMBDA_LOG_LEVEL to ApplicationLogLevel, and drops JSON lines below
// it by their "level" key; "timestamp" and "message" are the keys its
// own JSON lines use (lambdacontext.ReplaceAttr). The returned setter
// records the request id of the invocation in progress ("" clears it).
func lambdaLogger(w io.Writer, getenv func(string) string) (*slog.Logger, func(id string)) {
	cfg := config.Config{LogLevel: "info", LogFormat: "json"}
	if c, err := config.Load(nil, environOf(getenv)); err == nil {
		cfg.LogLevel, cfg.LogFormat = c.LogLevel, c.LogFormat
	}
	if l := getenv("AWS_LAMBDA_LOG_LEVEL"); l != "" {
		cfg.LogLevel = strings.ToLower(l)
	}
	lvl, err := config.ParseLevel(cfg.LogLevel)
	if err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var inner slog.Handler
	switch f := getenv("AWS_LAMBDA_LOG_FORMAT"); {
	case strings.EqualFold(f, "JSON"):
		opts.ReplaceAttr = lambdacontext.ReplaceAttr
		inner = slog.NewJSONHandler(w, opts)
	case strings.EqualFold(f, "Text"), cfg.LogFormat != "json":
		inner = slog.NewTextHandler(w, opts)
	default:
		inner = slog.NewJSONHandler(w, opts)
	}
	id := new(atomic.Pointer[string])
	set := func(s string) {
		if s == "" {
			id.Store(nil)
			return
		}
		id.Store(&s)
	}
	return slog.New(&requestLog{inner: inner, id: id}), set
}

// environOf lists the variables config.Load reads for the logger.
func environOf(getenv func(string) string) []string {
	var out []string
	for _, k := range []string{"MOLECULE_LOG_LEVEL", "MOLECULE_LOG_FORMAT"} {
		if v := getenv(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}
