package lambdafn

import (
	"io"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/molecule-ai/molecule-relay/internal/config"
)

// lambdaLogger builds the logger of a function under the Lambda runtime.
//
// With the function's LoggingConfig LogFormat JSON (the template's),
// Lambda sets AWS_LAMBDA_LOG_FORMAT=JSON and AWS_LAMBDA_LOG_LEVEL to its
// ApplicationLogLevel, and drops JSON lines below that level by their
// "level" key. The logger is then aws-lambda-go's own, as it is
// (lambdacontext.NewLogHandler): those two variables decide the format and
// the level (they win over MOLECULE_LOG_*), lines use Lambda's "timestamp"
// and "message" keys and go to stdout, and every line logged with a
// context that descends from an invocation's carries its "requestId". The
// stages log with the run's or the message's context, which under Lambda
// descends from the invocation's; the few lines logged without one (a
// stage's configuration warnings when it is built, SIGTERM) carry none.
//
// Otherwise (Lambda's Text format, or no logging configuration) there is
// no Lambda format to follow, and lambdacontext's handler would ignore
// MOLECULE_LOG_*: MOLECULE_LOG_FORMAT and MOLECULE_LOG_LEVEL decide, as in
// a worker, with AWS_LAMBDA_LOG_LEVEL winning when set and "Text" forcing
// text; lines go to w and carry no requestId (the runtime's START and END
// lines bound each invocation's lines in its log stream).
func lambdaLogger(w io.Writer, getenv func(string) string) *slog.Logger {
	format := getenv("AWS_LAMBDA_LOG_FORMAT")
	if format == "JSON" { // lambdacontext's test, byte for byte
		return lambdacontext.NewLogger()
	}
	cfg := config.Config{LogLevel: "info", LogFormat: "json"}
	if c, err := config.Load(nil, environOf(getenv)); err == nil {
		cfg.LogLevel, cfg.LogFormat = c.LogLevel, c.LogFormat
	}
	if l := getenv("AWS_LAMBDA_LOG_LEVEL"); l != "" {
		cfg.LogLevel = strings.ToLower(l)
	}
	if strings.EqualFold(format, "Text") {
		cfg.LogFormat = "text"
	}
	return cfg.NewLogger(w)
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
